"""``seal`` and ``verify``: tamper evidence over stored history."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pollard._core._amounts import plain_map, read_charges
from pollard._core._canon import SEAL_DOMAIN, canonical_bytes
from pollard._core._ledger import ZERO, decimal_text
from pollard._core._node import Node
from pollard._core._store import Store
from pollard.errors import IntegrityError
from pollard.stores._sql import SqlStore

__all__ = [
    "SealEntry",
    "SealReport",
    "VerifyFinding",
    "VerifyReport",
    "recompute_charges",
    "seal",
    "verify",
]

SEAL_ALGORITHM = "sha256:pollard/v1:seal"


@dataclass(frozen=True, slots=True)
class SealEntry:
    r"""One link of the seal chain (the fields of pollard 0.8's entries).

    Attributes:
        index: The node's position in the preorder walk.
        node_id: The node id.
        parent_id: The node's parent id (``None`` for the subtree's root node when it is a run
            root).
        kind: The node kind (``"root"``, ``"model_call"``, ...).
        result_digest: The node's result digest, ``None`` without a result.
        previous: The previous link's ``seal`` (``None`` for the first entry).
        seal: ``sha256("pollard/v1:seal\n" + canonical({index, node_id, parent_id, kind,
            result_digest, previous}))``, with ``""`` standing for each ``None``.
    """

    index: int
    node_id: str
    parent_id: str | None
    kind: str
    result_digest: str | None
    previous: str | None
    seal: str

    @property
    def digest(self) -> str:
        """This link's digest: the same value as ``seal`` (this project's earlier name)."""
        return self.seal

    def to_dict(self) -> dict[str, Any]:
        """Return the entry as JSON-ready data (0.8's keys)."""
        return {
            "index": self.index,
            "node_id": self.node_id,
            "parent_id": self.parent_id,
            "kind": self.kind,
            "result_digest": self.result_digest,
            "previous": self.previous,
            "seal": self.seal,
        }


@dataclass(frozen=True, slots=True)
class SealReport:
    """A deterministic rolling SHA-256 over a subtree's node ids and result digests.

    Attributes:
        root_id: The sealed subtree's root.
        algorithm: ``"sha256:pollard/v1:seal"``.
        digest: The final chain digest (store it beside an export to detect later changes).
        entries: One entry per node in preorder.
    """

    root_id: str
    algorithm: str
    digest: str
    entries: tuple[SealEntry, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {
            "root_id": self.root_id,
            "algorithm": self.algorithm,
            "digest": self.digest,
            "entries": [entry.to_dict() for entry in self.entries],
        }

    def matches(self, document: object) -> bool:
        """Whether ``document`` is this report's ``to_dict()`` in either entry layout.

        Entries are 0.8's ``{index, node_id, parent_id, kind, result_digest, previous, seal}``;
        this project's earlier files wrote ``{index, node_id, digest}``. Both stay readable.
        """
        if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
            return False
        head = {key: value for key, value in document.items() if key != "entries"}
        if head != {"root_id": self.root_id, "algorithm": self.algorithm, "digest": self.digest}:
            return False
        entries = document["entries"]
        if len(entries) != len(self.entries):
            return False
        for given, entry in zip(entries, self.entries, strict=True):
            short = {"index": entry.index, "node_id": entry.node_id, "digest": entry.seal}
            if given != entry.to_dict() and given != short:
                return False
        return True


def seal(store: Store, root_id: str) -> SealReport:
    """Seal the subtree at ``root_id``.

    Each node is validated (id and result digest recomputed) before it is hashed into the chain.
    Mutable metadata (charges, pruned flags) is not part of the seal.

    Args:
        store: The store.
        root_id: The subtree root (usually a run root).

    Returns:
        The seal report; equal trees give equal digests on every backend.

    Raises:
        KeyError: If ``root_id`` is not stored.
        IntegrityError: If a node does not match its content.

    Example:
        >>> from pollard import Runtime, seal
        >>> run = Runtime().run("audit")
        >>> _ = run.note({"status": "ready"})
        >>> len(seal(run.store, run.root_id).digest)
        64
    """
    previous = ""
    entries: list[SealEntry] = []
    for index, node in enumerate(store.walk(root_id)):
        node.check()
        material = {
            "index": index,
            "node_id": node.id,
            "parent_id": node.parent or "",
            "kind": node.kind.value,
            "result_digest": node.result_digest or "",
            "previous": previous,
        }
        link = hashlib.sha256(SEAL_DOMAIN + canonical_bytes(material)).hexdigest()
        entries.append(
            SealEntry(
                index,
                node.id,
                node.parent,
                node.kind.value,
                node.result_digest,
                previous or None,
                link,
            )
        )
        previous = link
    return SealReport(root_id, SEAL_ALGORITHM, previous, tuple(entries))


@dataclass(frozen=True, slots=True)
class VerifyFinding:
    """One verification problem.

    Attributes:
        node_id: The node at fault: for a damaged ledger total its scope (the run root or
            branch anchor it belongs to), ``""`` for a row of no one node (a reservation or a
            window event, which the message names).
        message: What is wrong.
    """

    node_id: str
    message: str

    def to_dict(self) -> dict[str, str]:
        """Return the finding as JSON-ready data."""
        return {"node_id": self.node_id, "message": self.message}


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of `verify`.

    Attributes:
        ok: True when there are no findings.
        findings: The problems found.
        nodes: How many nodes were checked.
    """

    ok: bool
    findings: tuple[VerifyFinding, ...] = ()
    nodes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data."""
        return {
            "ok": self.ok,
            "nodes": self.nodes,
            "findings": [finding.to_dict() for finding in self.findings],
        }


def _check(node: Node, findings: list[VerifyFinding]) -> None:
    try:
        node.check()
    except IntegrityError as exc:
        findings.append(VerifyFinding(node.id, exc.message))


def _ledger(store: Store, scopes: set[str] | None, findings: list[VerifyFinding]) -> None:
    # Only SQL stores hold ledger rows as text that something other than pollard could have
    # written; the memory and hash-rope stores keep Decimals that pollard itself computed.
    if isinstance(store, SqlStore):
        for owner, message in store.damaged_ledger_rows(scopes):
            findings.append(VerifyFinding(owner, message))


def verify(store: Store, node_id: str | None = None, *, subtree: bool = False) -> VerifyReport:
    """Verify stored history: ids, result digests and parent links, and the budget ledger.

    On a SQLite or PostgreSQL store the ledger rows the budget checks read are verified too:
    a running total that is not a finite decimal, a reservation that is not the stored list of
    held amounts, and a window event whose amount is not a decimal are findings (each would
    make the next budgeted step raise `IntegrityError`). With ``node_id``, the totals checked
    are those of the budget scopes among the verified nodes (the run root and the branch
    budgets that the node's steps charge); reservations and window events are always checked
    store-wide, because every admission reads every live reservation and a window can be
    shared by every run of the store.

    Args:
        store: The store.
        node_id: A node whose ancestry (up to its root) is verified. ``None`` verifies every
            node of every root in the store.
        subtree: Also verify every node below ``node_id``.

    Returns:
        A report; ``ok`` is False when any node does not match its content, a parent is missing,
        the ancestry has a cycle, or a ledger row is damaged (its finding's ``node_id`` is the
        total's scope, or ``""`` for a reservation or window event, which the message names).

    Raises:
        KeyError: If ``node_id`` is not stored.
    """
    findings: list[VerifyFinding] = []
    checked = 0
    if node_id is None:
        for root in store.roots():
            for node in store.walk(root.id):
                _check(node, findings)
                checked += 1
        _ledger(store, None, findings)
        return VerifyReport(not findings, tuple(findings), checked)
    start = store.get(node_id)
    seen: set[str] = set()
    current: Node | None = start
    while current is not None:
        if current.id in seen:
            findings.append(VerifyFinding(current.id, "the ancestry has a cycle"))
            break
        seen.add(current.id)
        _check(current, findings)
        checked += 1
        if current.parent is None:
            break
        parent = store.find(current.parent)
        if parent is None:
            findings.append(VerifyFinding(current.id, f"the parent {current.parent} is not stored"))
        current = parent
    if subtree:
        for node in store.walk(node_id):
            if node.id == node_id:
                continue
            seen.add(node.id)
            _check(node, findings)
            checked += 1
    _ledger(store, seen, findings)
    return VerifyReport(not findings, tuple(findings), checked)


def recompute_charges(
    store: Store, root_id: str, *, exact: bool = False
) -> dict[str, int | float] | dict[str, str]:
    """Sum ``meta["charges"]`` over a subtree by walking it (an audit of the running totals).

    For a run root this equals ``store.totals(root_id)``, which the runtime keeps up to date in
    the same transaction as each node write; a difference means the ledger or the metadata was
    changed outside pollard.

    Args:
        store: The store.
        root_id: The subtree root.
        exact: Give exact decimal strings (``"0.0000125"``), the audit form, instead of numbers.

    Returns:
        By meter (meters that sum to zero are left out): numbers like ``run.report()`` (an
        ``int`` when integral, else a ``float``), or exact decimal strings with ``exact=True``.

    Raises:
        KeyError: If ``root_id`` is not stored.
    """
    totals: dict[str, Decimal] = {}
    for node in store.walk(root_id):
        for meter, amount in read_charges(node.meta).items():
            totals[meter] = totals.get(meter, ZERO) + amount
    kept = {meter: v for meter, v in sorted(totals.items()) if v}
    if exact:
        return {meter: decimal_text(v) for meter, v in kept.items()}
    return plain_map(kept)
