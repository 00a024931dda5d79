"""The command implementations behind ``pollard.cli`` (each one a thin shell over the API)."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Callable
from contextlib import ExitStack
from decimal import Decimal
from pathlib import Path
from typing import Any

from pollard._core._canon import is_hex64
from pollard._core._store import Store
from pollard._edge._cache_tally import CacheTally
from pollard._edge._gc import gc
from pollard._edge._merge import merge
from pollard._edge._seal import seal, verify
from pollard._edge._teams import team_report, verify_dependencies
from pollard._edge._transfer import export_subtree, read_subtree, write_subtree
from pollard._edge._view import (
    add_into,
    build_view,
    decimal_map_exact,
    decimal_map_json,
    printable,
)
from pollard._governance._approvals import (
    Approval,
    decide_approval,
    get_approval,
    list_approvals,
)
from pollard.errors import IntegrityError, PollardError
from pollard.html import render_rows, seal_summary
from pollard.stores._sql import SqlStore

from .specs import (
    CLIError,
    StoreSpec,
    cannot_open,
    open_store,
    parse_store_spec,
    regular_or_missing,
    sqlite_read_only,
)
from .text import amounts, render_table, render_tree

Handler = Callable[[argparse.Namespace, ExitStack], int]

# The shortest id prefix looked up among every node (run roots match any prefix).
_MIN_PREFIX = 4


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _json(value: Any) -> None:
    _out(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def _open(
    stack: ExitStack, text: str, *, create: bool = False, write: bool = False
) -> tuple[StoreSpec, Store]:
    spec = parse_store_spec(text)
    store = open_store(spec, create=create, write=write)
    stack.callback(store.close)
    return spec, store


def _open_destination(stack: ExitStack, spec: StoreSpec) -> Store:
    """Open (or create) the destination of merge/import.

    A SQLite file this command created is removed again when the command fails before writing
    any run into it, so a refused merge or import leaves no empty store behind.
    """
    created = spec.path is not None and not spec.path.exists()
    store: Store = open_store(spec, create=True)
    stack.callback(store.close)
    if created:

        def discard(exc_type: type[BaseException] | None, *_: object) -> bool:
            if exc_type is not None and not store.roots():
                store.close()
                assert spec.path is not None
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{spec.path}{suffix}").unlink(missing_ok=True)
            return False

        stack.push(discard)
    return store


def _output_path(text: str, option: str, reading: StoreSpec) -> Path:
    """Check a file argument the command writes: not empty, not a directory, parent exists.

    It must not be the SQLite store the command reads (or its journal files): writing a page or
    a report there would replace the ledger itself.
    """
    if not text:
        raise CLIError(f"{option} needs a file name")
    path = Path(text)
    if path.is_dir():
        raise CLIError(f"cannot write {text}: it is a directory")
    regular_or_missing(path, text)
    if not path.parent.is_dir():
        raise CLIError(f"cannot write {text}: directory does not exist: {path.parent}")
    if reading.path is not None:
        store = reading.path.resolve()
        target = path.resolve()
        if target in {store.with_name(store.name + s) for s in ("", "-wal", "-shm", "-journal")}:
            raise CLIError(
                f"cannot write {text}: it is the store being read ({reading.label}); "
                "choose another file name"
            )
    return path


def resolve_root(store: Store, text: str) -> str:
    """Resolve ROOT: a node id, a run root's id prefix, a run label, or a node's id prefix."""
    if is_hex64(text) and store.exists(text):
        return text
    roots = store.roots()
    lowered = text.lower()
    by_prefix = [r.id for r in roots if r.id.startswith(lowered)] if lowered else []
    if len(by_prefix) == 1:
        return by_prefix[0]
    if len(by_prefix) > 1:
        raise CLIError(f"{text!r} matches {len(by_prefix)} runs; give more of the id")
    by_label = [r.id for r in roots if isinstance(r.payload, dict) and r.payload.get("run") == text]
    if len(by_label) == 1:
        return by_label[0]
    if len(by_label) > 1:
        raise CLIError(f"{len(by_label)} runs are labelled {text!r}; give the root id")
    # The short id `show` prints for an inner node (one walk over the store, on this path only).
    if len(lowered) >= _MIN_PREFIX and all(c in "0123456789abcdef" for c in lowered):
        matches = [n.id for r in roots for n in store.walk(r.id) if n.id.startswith(lowered)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise CLIError(f"{text!r} matches {len(matches)} nodes; give more of the id")
    raise CLIError(f"no node or run matches {text!r}")


def cmd_runs(args: argparse.Namespace, stack: ExitStack) -> int:
    runs: list[dict[str, Any]] = []
    for text in args.stores:
        spec, store = _open(stack, text)
        for root in store.roots():
            nodes = pruned = 0
            for node in store.walk(root.id):
                nodes += 1
                pruned += 1 if node.pruned else 0
            label = root.payload.get("run") if isinstance(root.payload, dict) else None
            runs.append(
                {
                    "store": spec.label,
                    "root_id": root.id,
                    "label": label if isinstance(label, str) else "",
                    "attempt": root.attempt,
                    "nodes": nodes,
                    "pruned": pruned,
                }
            )
    if args.json:
        _json({"runs": runs})
    elif runs:
        headers = ["store", "root", "label", "attempt", "nodes", "pruned"]
        rows = [
            [
                printable(r["store"]),
                r["root_id"][:12],
                printable(r["label"]),
                str(r["attempt"]),
                str(r["nodes"]),
                str(r["pruned"]),
            ]
            for r in runs
        ]
        _out(render_table(headers, rows))
    else:
        _out("no runs")
    return 0


def cmd_show(args: argparse.Namespace, stack: ExitStack) -> int:
    spec, store = _open(stack, args.store)
    root_id = resolve_root(store, args.root)
    nodes = list(store.walk(root_id))
    rows = build_view(nodes, payloads=args.payloads)
    if args.html is not None:
        target = _output_path(args.html, "--html", spec)
        page = render_rows(
            rows,
            root_id=root_id,
            payloads=args.payloads,
            seal_html=seal_summary(nodes, root_id),
        )
        data = page.encode("utf-8")
        try:
            target.write_bytes(data)
        except OSError as exc:
            raise CLIError(f"cannot write {args.html}: {exc.strerror or exc}") from None
        if args.json:
            _json({"root_id": root_id, "output": str(target), "bytes": len(data)})
        else:
            _out(str(target))
        return 0
    if args.json:
        _json({"root_id": root_id, "nodes": [row.to_json() for row in rows]})
    else:
        _out(render_tree(rows, unicode=args.unicode))
    return 0


def _approval_row(approval: Approval) -> list[str]:
    decided = (
        f"{approval.status} by {approval.decided_by}"
        if approval.decided_by is not None
        else approval.status
    )
    return [
        approval.request_id[:12],
        printable(approval.run or ""),
        printable(approval.actor or "-"),
        printable(f"{approval.action}@{approval.version}"),
        approval.args_digest[:12],
        printable(decided),
        "spent" if approval.spent_on else "-",
    ]


def _approval_table(found: list[Approval]) -> str:
    headers = ["request", "run", "actor", "action", "args", "status", "used"]
    return render_table(headers, [_approval_row(a) for a in found])


def cmd_approvals(args: argparse.Namespace, stack: ExitStack) -> int:
    _, store = _open(stack, args.store)
    status = None if args.status == "all" else args.status
    found = list_approvals(store, status=status, run=args.run)
    if args.json:
        _json({"approvals": [a.to_json() for a in found]})
    elif found:
        _out(_approval_table(found))
    else:
        _out(f"no {'' if status is None else status + ' '}approval requests")
    return 0


def resolve_request(store: Store, text: str) -> str:
    """Resolve REQUEST: an approval request id, or a unique prefix of one (4+ hex digits)."""
    lowered = text.lower()
    if is_hex64(lowered):
        return lowered
    if len(lowered) < _MIN_PREFIX or not all(c in "0123456789abcdef" for c in lowered):
        raise CLIError(f"{text!r} is not an approval request id (give at least 4 hex digits)")
    matches = [a.request_id for a in list_approvals(store) if a.request_id.startswith(lowered)]
    if len(matches) > 1:
        raise CLIError(f"{text!r} matches {len(matches)} approval requests; give more of the id")
    if not matches:
        raise CLIError(f"no approval request matches {text!r}")
    return matches[0]


def cmd_decide(args: argparse.Namespace, stack: ExitStack) -> int:
    _, store = _open(stack, args.store, write=True)
    request_id = resolve_request(store, args.request)
    get_approval(store, request_id)  # KeyError / ValueError before anything is written
    approval = decide_approval(
        store,
        request_id,
        "approve" if args.command == "approve" else "deny",
        by=args.by,
        reason=args.reason,
    )
    if args.json:
        _json({"approval": approval.to_json()})
    else:
        _out(f"{approval.status} {approval.request_id} by {printable(approval.decided_by or '')}")
    return 0


def cmd_report(args: argparse.Namespace, stack: ExitStack) -> int:
    _, store = _open(stack, args.store)
    root_id = resolve_root(store, args.root)
    spent: dict[str, Decimal] = {}
    avoided: dict[str, Decimal] = {}
    count = refusals = pruned = 0
    cache = CacheTally()
    for row in build_view(cache.tally(store.walk(root_id))):
        count += 1
        refusals += 1 if row.refusal is not None else 0
        pruned += 1 if row.pruned else 0
        add_into(spent, row.charges)
        add_into(avoided, row.avoided)
    spent = dict(sorted(spent.items()))
    avoided = dict(sorted(avoided.items()))
    # The store's running totals for this scope (what budgets are checked against); they keep
    # the spend of nodes gc dropped and of dispatches settled without a node of their own.
    ledger = dict(sorted(store.totals(root_id).items()))
    if args.json:
        _json(
            {
                "root_id": root_id,
                "nodes": count,
                "refusals": refusals,
                "pruned": pruned,
                "spent": decimal_map_json(spent),
                "avoided": decimal_map_json(avoided),
                "ledger": decimal_map_json(ledger),
                "cache": cache.to_json(),
                # Numbers above are for reading and summing; these exact texts are for audits.
                "exact": {
                    "spent": decimal_map_exact(spent),
                    "avoided": decimal_map_exact(avoided),
                    "ledger": decimal_map_exact(ledger),
                },
            }
        )
    else:
        _out(f"root      {root_id}")
        _out(f"nodes     {count} ({refusals} refused, {pruned} pruned)")
        _out(f"spent     {amounts(spent) or 'nothing'}")
        _out(f"avoided   {amounts(avoided) or 'nothing'}")
        _out(f"ledger    {amounts(ledger) or 'nothing'}")
        _out(f"cache     {cache.line()}")
    return 0


def unreachable_findings(store: SqlStore, checked: int) -> list[dict[str, str]]:
    """Nodes of a SQL store (SQLite or PostgreSQL) that no run root reaches.

    ``verify`` walks the runs from their roots, so a node whose parent was deleted (or whose
    ancestry was rewritten into a cycle) is never visited. The store's nodes are counted in one
    query; only when the counts differ are the stray nodes listed.
    """
    if store.node_count() == checked:
        return []
    rows = store.links()
    # Walk after listing: a node a live writer adds meanwhile is not in the list, and every
    # listed node that hangs off a run (parents are stored before children) is reached.
    reached = {node.id for root in store.roots() for node in store.walk(root.id)}
    parents: dict[str, str | None] = dict(rows)
    findings = []
    for node_id, parent in rows:
        if node_id in reached:
            continue
        # Climb to the first ancestor whose parent is missing (or find a cycle).
        seen = {node_id}
        current, above = node_id, parent
        while above in parents and above not in seen:
            seen.add(above)
            current, above = above, parents[above]
        if above is None or above in seen:
            why = "its ancestry has a cycle"
        elif current == node_id:
            why = f"its parent {above} is not stored"
        else:
            why = f"its ancestor {current} has a parent {above} that is not stored"
        findings.append(
            {"node_id": node_id, "message": f"node {node_id} is unreachable from any run: {why}"}
        )
    return findings


def sqlite_findings(path: Path) -> list[dict[str, str]]:
    """SQLite's own ``integrity_check`` of a store file: damaged pages, broken indexes."""
    connection = sqlite_read_only(path)
    try:
        rows = connection.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.DatabaseError as exc:
        rows = [(str(exc),)]
    finally:
        connection.close()
    return [
        {"node_id": "", "message": f"the SQLite file is damaged: {message}"}
        for (message,) in rows
        if message != "ok"
    ]


def cmd_verify(args: argparse.Namespace, stack: ExitStack) -> int:
    try:
        spec, store = _open(stack, args.store)
    except IntegrityError as exc:  # a damaged SQLite file is a finding, not a crash
        damaged = [{"node_id": "", "message": str(exc)}]
        return _verdict(args, damaged, roots=0, nodes=0)
    extra: list[dict[str, str]] = []
    if spec.path is not None:
        extra = sqlite_findings(spec.path)
        if extra:  # walking damaged pages would only repeat (or crash on) what SQLite found
            return _verdict(args, extra, roots=0, nodes=0)
    if args.root:
        root_id = resolve_root(store, args.root)
        report = verify(store, root_id, subtree=True)
        roots = 1
    else:
        report = verify(store)
        roots = len(store.roots())
        if isinstance(store, SqlStore):
            extra = unreachable_findings(store, report.nodes)
    findings = [finding.to_dict() for finding in report.findings] + extra
    return _verdict(args, findings, roots=roots, nodes=report.nodes)


def _verdict(
    args: argparse.Namespace, findings: list[dict[str, str]], *, roots: int, nodes: int
) -> int:
    ok = not findings
    if args.json:
        _json({"ok": ok, "roots": roots, "nodes": nodes, "findings": findings})
    else:
        for finding in findings:
            _out(f"{finding['node_id'] or 'store'}: {finding['message']}")
        verdict = "ok" if ok else f"{len(findings)} finding(s)"
        _out(f"verified {nodes} node(s) in {roots} run(s): {verdict}")
    return 0 if ok else 1


def _amount_text(values: dict[str, Any]) -> str:
    # Exact decimal texts, printed as `pollard report` prints amounts (0.0000057, not 5.7e-06).
    return amounts({meter: Decimal(str(value)) for meter, value in values.items()}) or "-"


def cmd_team_report(args: argparse.Namespace, stack: ExitStack) -> int:
    _, store = _open(stack, args.store)
    root_id = resolve_root(store, args.root)
    report = team_report(store, root_id, exact=True)
    if args.json:
        _json(report)
        return 0
    rows = [
        [
            "/".join(agent["path"]) or str(agent["name"]),
            str(agent["role"]),
            str(agent["task"]),
            _amount_text(agent["own"]),
            _amount_text(agent["total"]),
        ]
        for agent in report["agents"]
    ]
    lines = [render_table(["agent", "role", "task", "own", "with sub-agents"], rows)]
    for title, key in (("role", "by_role"), ("task", "by_task")):
        lines.append("")
        lines.append(
            render_table([title, "charges"], [[k, _amount_text(v)] for k, v in report[key].items()])
        )
    lines.append("")
    lines.append(f"unattributed: {_amount_text(report['unattributed'])}")
    lines.append(f"total: {_amount_text(report['total'])}")
    _out("\n".join(lines))
    return 0


def cmd_verify_dependencies(args: argparse.Namespace, stack: ExitStack) -> int:
    _, store = _open(stack, args.store)
    root_id = resolve_root(store, args.root)
    report = verify_dependencies(store, root_id)
    if args.json:
        _json(report.to_dict() | {"root_id": root_id})
    else:
        for finding in report.findings:
            _out(f"{finding.node_id}: {finding.message}")
        verdict = "ok" if report.ok else f"{len(report.findings)} finding(s)"
        _out(f"checked {report.nodes} reference(s): {verdict}")
    return 0 if report.ok else 1


def cmd_seal(args: argparse.Namespace, stack: ExitStack) -> int:
    spec, store = _open(stack, args.store)
    root_id = resolve_root(store, args.root)
    report = seal(store, root_id)
    full = report.to_dict()
    if args.output is not None:
        target = _output_path(args.output, "--output", spec)
        text = json.dumps(full, indent=2, sort_keys=True) + "\n"
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CLIError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        summary = {"root_id": root_id, "digest": report.digest, "output": args.output}
        if args.json:
            _json(summary)
        else:
            _out(report.digest)
        return 0
    if args.json:
        _json(full)
    else:
        _out(report.digest)
    return 0


def _same_store(a: StoreSpec, b: StoreSpec) -> bool:
    if a.path is not None and b.path is not None:
        # realpath, not Path.resolve: a symlink loop is refused when the store opens, not here
        # as a RuntimeError.
        return os.path.realpath(a.path) == os.path.realpath(b.path)
    return a.kind == b.kind and a.label == b.label


def _postgres_store_exists(spec: StoreSpec) -> bool:
    try:
        open_store(spec).close()  # read-only: refuses a store id that does not exist
    except CLIError:
        return False  # missing (or unreachable: opening the destination then says so)
    return True


def cmd_merge(args: argparse.Namespace, stack: ExitStack) -> int:
    dest_spec = parse_store_spec(args.dest)
    source_specs = [parse_store_spec(text) for text in args.sources]
    for spec in source_specs:
        if _same_store(spec, dest_spec):
            raise CLIError(f"source {spec.label} is the destination")
    sources = [(spec, open_store(spec)) for spec in source_specs]
    for _, store in sources:
        stack.callback(store.close)
    if dest_spec.kind == "postgres" and not _postgres_store_exists(dest_spec):
        # A SQLite destination this command creates is deleted again when it fails; a new
        # PostgreSQL store id cannot be, so every source node is checked before it is created
        # (the check merge itself makes first, with the same error).
        for _, store in sources:
            for root in store.roots():
                for node in store.walk(root.id):
                    node.check()
    dest = _open_destination(stack, dest_spec)
    results = []
    totals = {"copied": 0, "existing": 0, "result_conflicts": 0, "meta_conflicts": 0}
    for spec, store in sources:
        report = merge(dest, store, replay=args.replay).to_dict()
        for key in totals:
            totals[key] += report[key]
        results.append({"source": spec.label, **report})
    if args.json:
        # The sums sit at the top level, as in pollard 0.8, and again under "totals".
        _json({"destination": dest_spec.label, "sources": results, **totals, "totals": totals})
    else:
        for item in results:
            _out(
                f"{item['source']}: copied {item['copied']}, existing {item['existing']}, "
                f"result conflicts {item['result_conflicts']}, "
                f"meta conflicts {item['meta_conflicts']}"
            )
        _out(f"merged into {dest_spec.label}: copied {totals['copied']} node(s)")
    return 0


def cmd_gc(args: argparse.Namespace, stack: ExitStack) -> int:
    _, store = _open(stack, args.store, write=True)
    report = gc(store, args.mode)
    if args.json:
        _json(report.to_dict())
    else:
        _out(
            f"{report.mode}: removed {report.removed_count} node(s), {report.removed_blobs} blob(s)"
        )
        for root_id, digest in report.survivor_seals.items():
            _out(f"seal {root_id} {digest}")
    return 0


def cmd_export(args: argparse.Namespace, stack: ExitStack) -> int:
    spec, store = _open(stack, args.store)
    root_id = resolve_root(store, args.root)
    target = _output_path(args.file, "FILE", spec)
    try:
        report = export_subtree(store, root_id, target)
    except OSError as exc:
        raise CLIError(f"cannot write {args.file}: {exc.strerror or exc}") from None
    if args.json:
        _json(report.to_dict())
    else:
        _out(f"exported {report.nodes} node(s) to {report.path}")
        _out(f"seal {report.digest}")
    return 0


def cmd_import(args: argparse.Namespace, stack: ExitStack) -> int:
    path = Path(args.file)
    regular_or_missing(path, args.file)
    if not path.is_file():
        raise CLIError(f"no such file: {args.file}")
    # Verify the whole file before the target store is opened (or created). A file that does
    # not verify is a bad input, exit 2 as in pollard 0.8 (the store is never touched).
    try:
        root_id, nodes, digest = read_subtree(path, expected_digest=args.expect_seal)
    except IntegrityError as exc:
        raise CLIError(f"integrity: {exc}") from None
    store = _open_destination(stack, parse_store_spec(args.store))
    report = write_subtree(store, root_id, nodes, digest)
    if args.json:
        _json(report.to_dict())
    else:
        _out(
            f"imported {report.imported} node(s) ({report.existing} already present) "
            f"under {report.root_id}"
        )
        _out(f"seal {report.digest}")
    return 0


def _migrated(args: argparse.Namespace, store: Store, message: str, extra: dict[str, Any]) -> int:
    """Verify a migrated store and print its seals (0.8's); exit 1 on findings."""
    findings = verify(store)
    seals = {root.id: seal(store, root.id).digest for root in store.roots()}
    if args.json:
        _json({**extra, "ok": findings.ok, "seals": seals})
    else:
        _out(message)
        for root_id, digest in seals.items():
            _out(f"seal {root_id} {digest}")
    return 0 if findings.ok else 1


def _refuse_newer_format(spec: StoreSpec) -> None:
    """A store a newer release wrote is not "nothing to migrate": say which format it holds.

    Raises:
        CLIError: The store holds a format this release does not know (never migrated back).
    """
    try:
        if spec.kind == "postgres":
            from pollard.stores.postgres import check_store_format

            check_store_format(spec.dsn(), spec.store_id)
        else:
            from pollard.stores.sqlite import check_file_format

            assert spec.path is not None
            check_file_format(spec.path)
    except PollardError as exc:
        raise cannot_open(
            spec.label, exc, spec.dsn() if spec.kind == "postgres" else "", verb="migrate"
        ) from None


def _migrate_in_place(args: argparse.Namespace, spec: StoreSpec, stack: ExitStack) -> int:
    if spec.kind == "postgres":
        from pollard.stores.postgres import is_legacy_schema

        dsn = spec.dsn()
        try:
            legacy = is_legacy_schema(dsn)
        except ImportError:
            raise
        except Exception as exc:
            # The driver's message may echo the DSN: open_store reports the problem scrubbed.
            open_store(spec).close()
            raise CLIError(f"cannot open {spec.label}: {type(exc).__name__}") from None
        if not legacy:
            _refuse_newer_format(spec)
            raise CLIError(f"{spec.label} holds no pollard 0.8 tables: nothing to migrate")
        store = open_store(spec, create=True)
        stack.callback(store.close)
        kept = getattr(store, "migration_backup", None)
        return _migrated(
            args,
            store,
            f"migrated the pollard 0.8 tables of {spec.label} in place (kept as {kept})",
            {"source": spec.label, "target": spec.label, "backup": kept},
        )
    from pollard.stores.sqlite import SQLiteStore, is_legacy_store

    assert spec.path is not None
    if not spec.path.is_file():
        raise CLIError(f"no such file: {args.src}")
    if not is_legacy_store(spec.path):
        _refuse_newer_format(spec)
        raise CLIError(f"{args.src} is not a pollard 0.8 store: nothing to migrate")
    sqlite_store = SQLiteStore(spec.path)
    stack.callback(sqlite_store.close)
    backup = None if sqlite_store.migration_backup is None else str(sqlite_store.migration_backup)
    return _migrated(
        args,
        sqlite_store,
        f"migrated {spec.path} in place (the pollard 0.8 file is kept as {backup})",
        {"source": str(spec.path), "target": str(spec.path), "backup": backup},
    )


def cmd_migrate(args: argparse.Namespace, stack: ExitStack) -> int:
    from pollard.stores.sqlite import SQLiteStore, copy_legacy_file, is_legacy_store

    spec = parse_store_spec(args.src)
    if args.dst is None:
        return _migrate_in_place(args, spec, stack)
    if spec.kind != "sqlite" or spec.path is None:
        raise CLIError(
            "migrate SRC DST copies a SQLite file; migrate a PostgreSQL store in place with "
            f"`pollard migrate {args.src}` (then `pollard merge` copies it elsewhere)"
        )
    source, target = spec.path, Path(args.dst)
    if not source.is_file():
        raise CLIError(f"no such file: {args.src}")
    if not is_legacy_store(source):
        _refuse_newer_format(spec)
        raise CLIError(
            f"{args.src} is not a pollard 0.8 store: nothing to migrate (this version opens it "
            "as it is)"
        )
    if target.exists():
        raise CLIError(f"{args.dst} exists: migrate writes a new file (choose another name)")
    store = SQLiteStore(target)
    stack.callback(store.close)
    try:
        count = copy_legacy_file(source, store)
    except BaseException:
        store.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        raise
    return _migrated(
        args,
        store,
        f"migrated {count} node(s) from {source} (pollard 0.8) to {target}",
        {"source": str(source), "target": str(target), "nodes": count},
    )


COMMANDS: dict[str, Handler] = {
    "runs": cmd_runs,
    "show": cmd_show,
    "report": cmd_report,
    "verify": cmd_verify,
    "team-report": cmd_team_report,
    "verify-dependencies": cmd_verify_dependencies,
    "seal": cmd_seal,
    "merge": cmd_merge,
    "gc": cmd_gc,
    "export": cmd_export,
    "import": cmd_import,
    "migrate": cmd_migrate,
    "approvals": cmd_approvals,
    "approve": cmd_decide,
    "deny": cmd_decide,
}


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])
        return text if " " in text else f"not found: {text}"
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command and map errors to exit codes (0 ok, 1 integrity, 2 input)."""
    handler = COMMANDS[args.command]
    try:
        with ExitStack() as stack:
            return handler(args, stack)
    except BrokenPipeError:
        # `pollard show ... | head`: the reader went away, which is not an error. Point stdout at
        # devnull so the interpreter's final flush does not complain.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except IntegrityError as exc:
        sys.stderr.write(f"pollard: integrity: {_message(exc)}\n")
        return 1
    except sqlite3.DatabaseError as exc:
        if type(exc) is not sqlite3.DatabaseError:  # locked, read-only, misuse: input errors
            sys.stderr.write(f"pollard: {_message(exc)}\n")
            return 2
        # "database disk image is malformed": the file was damaged behind pollard's back.
        sys.stderr.write(f"pollard: integrity: the SQLite file is damaged: {_message(exc)}\n")
        return 1
    except json.JSONDecodeError as exc:
        # Files are parsed with their own messages; this is a stored row that is not JSON,
        # which pollard never writes: the store was changed behind its back.
        sys.stderr.write(f"pollard: integrity: a stored node holds invalid JSON ({exc.msg})\n")
        return 1
    except (
        CLIError,
        PollardError,
        ImportError,
        KeyError,
        OSError,
        TypeError,
        ValueError,
        sqlite3.Error,
    ) as exc:
        sys.stderr.write(f"pollard: {_message(exc)}\n")
        return 2
    except Exception as exc:
        # Anything else (a database driver's own error, a bug) is still one line and exit 2:
        # exit 1 is reserved for integrity findings, so a crash must not look like one.
        sys.stderr.write(f"pollard: unexpected {type(exc).__name__}: {_message(exc)}\n")
        return 2
