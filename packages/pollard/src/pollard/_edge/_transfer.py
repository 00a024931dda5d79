"""``export_subtree`` / ``import_subtree``: move a sealed subtree between stores as one file.

The file is JSON (``indent=2``, sorted keys) in the ``pollard/subtree/v1`` format::

    {"format": "pollard/subtree/v1", "root_id": ..., "seal": {...full seal report...},
     "content_digest": ..., "nodes": [{"id", "parent", "kind", "attempt", "payload",
     "result", "result_digest", "meta"}, ...]}

The seal is written in pollard 0.8's layout (every entry with its ``kind``, ``parent_id``,
``result_digest``, ``previous`` and ``seal``), so pollard 0.8 imports these files (it ignores the
keys it does not know). Import reads both that layout and the short one earlier versions of this
project wrote (``index``, ``node_id``, ``digest`` per entry), and files exported by pollard 0.8,
which have no ``content_digest``: their metadata is covered by no digest (0.8 had none), their
ids, results and seal are checked as usual.

Nodes are in walk (preorder) order; ``payload``, ``result`` and ``meta`` are the exact stored JSON
texts, so digests recompute byte for byte. ``content_digest`` is a SHA-256 over every node record
including metadata (the seal leaves metadata out).

Import trusts nothing in the file: it rebuilds every node (ids and result digests are
recomputed), rejects duplicates, nodes out of walk order and parents outside the subtree,
recomputes the seal and the content digest and compares them, optionally checks the seal digest
against one kept elsewhere, requires the subtree's parent to exist in the target, and refuses any
identity or result conflict with what the target holds. Only then does it write.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pollard._core._canon import is_hex64, json_text
from pollard._core._node import Node
from pollard._core._store import Store
from pollard._edge._manifest import ManifestStore
from pollard._edge._merge import ScopeTracker, node_charges
from pollard._edge._seal import seal
from pollard._version import __version__
from pollard.errors import IntegrityError

__all__ = ["ExportReport", "ImportReport", "export_subtree", "import_subtree"]

FORMAT = "pollard/subtree/v1"
_CONTENT_DOMAIN = b"pollard/v1:export\n"
_FIELDS = ("id", "parent", "kind", "attempt", "payload", "result", "result_digest", "meta")


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What :func:`export_subtree` wrote.

    Attributes:
        root_id: The top of the exported subtree.
        path: The file written.
        nodes: Nodes exported.
        digest: The subtree's seal digest (keep it apart from the file to check imports).
    """

    root_id: str
    path: str
    nodes: int
    digest: str

    def to_dict(self) -> dict[str, object]:
        """The report as a JSON-ready dict."""
        return {
            "root_id": self.root_id,
            "path": self.path,
            "nodes": self.nodes,
            "digest": self.digest,
        }


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What :func:`import_subtree` did.

    Attributes:
        root_id: The top of the imported subtree.
        imported: Nodes written.
        existing: Nodes the target already held (identical identity and result).
        digest: The verified seal digest.
    """

    root_id: str
    imported: int
    existing: int
    digest: str

    def to_dict(self) -> dict[str, object]:
        """The report as a JSON-ready dict."""
        return {
            "root_id": self.root_id,
            "imported": self.imported,
            "existing": self.existing,
            "digest": self.digest,
        }


def _record(node: Node) -> dict[str, Any]:
    payload = node.payload_text if node.payload_text is not None else json_text(node.payload)
    result = node.result_text
    if result is None and node.result is not None:
        result = json_text(node.result)
    return {
        "id": node.id,
        "parent": node.parent,
        "kind": node.kind.value,
        "attempt": node.attempt,
        "payload": payload,
        "result": result,
        "result_digest": node.result_digest,
        "meta": json_text(node.meta),
    }


def content_digest(records: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 over the node records (metadata included), domain-separated."""
    body = json.dumps(list(records), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(_CONTENT_DOMAIN + body.encode("utf-8")).hexdigest()


def export_subtree(store: Store, root_id: str, path: str | Path) -> ExportReport:
    """Write the subtree under ``root_id`` to ``path`` as a sealed ``pollard/subtree/v1`` file.

    Args:
        store: The store to read.
        root_id: The top of the subtree (a run root or any node).
        path: The file to write (replaced if it exists).

    Returns:
        The node count and the seal digest.

    Raises:
        KeyError: ``root_id`` is not stored.
        IntegrityError: A node does not match its content (nothing is written).

    Example:
        >>> import tempfile, pathlib
        >>> from pollard import MemoryStore, Runtime, export_subtree, import_subtree
        >>> with Runtime().run("job") as run:
        ...     _ = run.note({"status": "ready"})
        ...     path = pathlib.Path(tempfile.mkdtemp()) / "job.json"
        ...     report = export_subtree(run.store, run.root_id, path)
        >>> import_subtree(path, MemoryStore()).imported
        2
    """
    # One walk: the seal and the records describe the same snapshot even if a writer appends
    # nodes meanwhile. Sealing validates every node before anything is written.
    nodes = list(store.walk(root_id))
    sealed = seal(ManifestStore(nodes), root_id)
    records = [_record(node) for node in nodes]
    document = {
        "format": FORMAT,
        "pollard_version": __version__,
        "root_id": root_id,
        "seal": sealed.to_dict(),
        "content_digest": content_digest(records),
        "nodes": records,
    }
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    except OSError:
        with contextlib.suppress(OSError):  # a target that cannot be replaced leaves no stray file
            tmp.unlink()
        raise
    return ExportReport(root_id, str(target), len(records), sealed.digest)


def _bad(message: str) -> ValueError:
    return ValueError(f"not a valid {FORMAT} file: {message}")


def _text(record: Mapping[str, Any], key: str, index: int, *, optional: bool = False) -> Any:
    value = record.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _bad(f"nodes[{index}].{key} must be a JSON text string")
    try:
        return json.loads(value)
    except ValueError:
        raise _bad(f"nodes[{index}].{key} is not JSON") from None


def _parse_node(record: Any, index: int) -> Node:
    if not isinstance(record, dict) or set(record) != set(_FIELDS):
        raise _bad(f"nodes[{index}] must be an object with the fields {', '.join(_FIELDS)}")
    meta = _text(record, "meta", index)
    if not isinstance(meta, dict):
        raise _bad(f"nodes[{index}].meta must be a JSON object text")
    # Parsed outside the try below: their errors already carry the file prefix.
    payload = _text(record, "payload", index)
    result = _text(record, "result", index, optional=True)
    try:
        node = Node(
            id=record["id"],
            parent=record["parent"],
            kind=record["kind"],
            attempt=record["attempt"],
            payload=payload,
            result=result,
            result_digest=record["result_digest"],
            meta=meta,
            payload_text=record["payload"],
            result_text=record["result"],
        )
    except (TypeError, ValueError) as exc:
        raise _bad(f"nodes[{index}]: {exc}") from None
    node.check()  # IntegrityError when the id or result digest does not match the content
    return node


def read_subtree(
    path: str | Path, *, expected_digest: str | None = None
) -> tuple[str, list[Node], str]:
    """Parse and fully verify a subtree file without touching any store.

    Returns:
        ``(root_id, nodes in walk order, seal digest)``.

    Raises:
        ValueError: The file is not a well-formed subtree file.
        IntegrityError: The content does not match its ids, digests or seal.
    """
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise _bad("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise _bad(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise _bad("missing or unknown 'format'")
    root_id = document.get("root_id")
    records = document.get("nodes")
    sealed = document.get("seal")
    if not isinstance(root_id, str) or not is_hex64(root_id):
        raise _bad("'root_id' must be a node id")
    if not isinstance(records, list) or not records:
        raise _bad("'nodes' must be a non-empty list")
    if not isinstance(sealed, dict) or not isinstance(sealed.get("digest"), str):
        raise _bad("'seal' must be a seal report with a digest")
    nodes: list[Node] = []
    seen: set[str] = set()
    for index, record in enumerate(records):
        node = _parse_node(record, index)
        if node.id in seen:
            raise IntegrityError(f"node {node.id} appears twice in the file", node.id)
        if index == 0:
            if node.id != root_id:
                raise IntegrityError("the first node is not the file's root_id", node.id)
        elif node.parent not in seen:
            raise IntegrityError(
                f"node {node.id} is out of walk order or its parent is outside the subtree",
                node.id,
            )
        seen.add(node.id)
        nodes.append(node)
    # pollard 0.8 wrote neither key: its files carry no digest over the metadata.
    from_08 = "content_digest" not in document and "pollard_version" not in document
    if not from_08 and document.get("content_digest") != content_digest(records):
        raise IntegrityError(
            "the file's content digest does not match its nodes (edited after export)", root_id
        )
    recomputed = seal(ManifestStore(nodes), root_id)
    if not recomputed.matches(sealed):
        raise IntegrityError("the file's seal does not match its nodes", root_id)
    if expected_digest is not None and recomputed.digest != expected_digest:
        raise IntegrityError(
            f"the seal digest {recomputed.digest} is not the expected {expected_digest}", root_id
        )
    return root_id, nodes, recomputed.digest


def _run_root(store: Store, node_id: str) -> str:
    current = store.get(node_id)
    while current.parent is not None:
        current = store.get(current.parent)
    return current.id


def import_subtree(
    path: str | Path, store: Store, *, expected_digest: str | None = None
) -> ImportReport:
    """Verify a ``pollard/subtree/v1`` file and write its nodes into ``store``.

    Args:
        path: The file written by :func:`export_subtree`.
        store: The target store.
        expected_digest: A seal digest kept apart from the file; the import is refused when the
            file's recomputed seal differs. Without it, a consistent forgery (a file whose ids,
            digests and seal were all recomputed) cannot be told from an original.

    Returns:
        How many nodes were written and how many the target already had.

    Raises:
        ValueError: The file is malformed.
        IntegrityError: The file was tampered with, or conflicts with the target store.
        KeyError: The subtree's parent is not in the target store.
    """
    root_id, nodes, digest = read_subtree(path, expected_digest=expected_digest)
    return write_subtree(store, root_id, nodes, digest)


def write_subtree(store: Store, root_id: str, nodes: Sequence[Node], digest: str) -> ImportReport:
    """Write nodes verified by :func:`read_subtree` into ``store`` (conflicts checked first)."""
    top = nodes[0]
    if top.parent is not None and not store.exists(top.parent):
        raise KeyError(
            f"the subtree's parent {top.parent} is not in the target store; import its "
            "ancestors first"
        )
    present: set[str] = set()
    for node in nodes:
        stored = store.find(node.id)
        if stored is None:
            continue
        if stored.identity() != node.identity():
            raise IntegrityError(
                f"node id collision: {node.id} is stored with a different identity", node.id
            )
        if stored.result_digest != node.result_digest:
            raise IntegrityError(
                f"node {node.id} has a different result in the target store",
                node.id,
                hint="use merge to keep both results as a recorded conflict",
            )
        present.add(node.id)
    base = (_run_root(store, top.parent),) if top.parent is not None else ()
    tracker = ScopeTracker(None)
    imported = 0
    for node in nodes:
        scopes = tracker.scopes(node, base)
        if node.id not in present and store.commit(
            node, scopes=scopes, charges=node_charges(node.meta)
        ):
            imported += 1
    return ImportReport(root_id, imported, len(nodes) - imported, digest)
