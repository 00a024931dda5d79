"""The ``pollard`` command line (standard library only).

Commands (``pollard COMMAND --help`` for each)::

    runs STORE...                 list the runs in one or more stores
    show STORE ROOT               the tree of a run (content-free; --payloads, --json, --html FILE)
    report STORE ROOT             node count, spent and avoided charges
    verify STORE [ROOT]           check ids, result digests, ancestry and the budget ledger
    team-report STORE ROOT        charges by agent, task and role (teams of agents)
    verify-dependencies STORE ROOT  check the references and handoffs between agents
    seal STORE ROOT               the rolling SHA-256 seal of a subtree
    merge DEST SRC...             copy runs from other stores, recording conflicts
    gc STORE drop-pruned|compact  offline garbage collection
    export STORE ROOT FILE        write a sealed subtree file
    import FILE STORE             verify a subtree file and write it into a store
    approvals STORE               list approval requests (pending by default; --status)
    approve STORE REQUEST --by N  approve a pending request (recorded once)
    deny STORE REQUEST --by N     deny a pending request (recorded once)

Exit codes: 0 success, 1 integrity findings (verify findings, a tampered store or file),
2 usage or input errors (one ``pollard: ...`` line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from ._cli.specs import CLIError
from ._version import __version__

__all__ = ["build_parser", "main"]

_EPILOG = (
    "STORE is a SQLite file, postgresql://...#store_id, or pg-env:VAR#store_id (DSN read from "
    "the environment variable VAR). Exit codes: 0 ok, 1 integrity findings, 2 usage or input "
    "errors."
)

_ROOT_HELP = "a node id, a unique id prefix of a run root, or a run label"


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors become one ``pollard: ...`` line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see '{self.prog} --help')")


class _CommandParser(_Parser):
    """A command's parser: options may come between positionals (``verify STORE --json ROOT``).

    argparse matches positionals in runs between options, so an optional or repeated positional
    after an option (``verify``'s ROOT, a second ``runs`` STORE, a further ``merge`` SRC) was an
    "unrecognized argument". The intermixed parser matches them all; it calls
    ``parse_known_args`` itself (Python 3.10 to 3.12), hence the guard.
    """

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the ``pollard`` command.

    Returns:
        The parser; every command is a sub-parser with its own ``--help``.
    """
    parser = _Parser(
        prog="pollard",
        description="Inspect, verify, seal, merge and move pollard execution trees.",
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"pollard {__version__}")
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_CommandParser
    )

    def add(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=description, epilog=_EPILOG)

    p = add(
        "runs",
        "list the runs in one or more stores",
        "List every run root: store, root id, label, attempt, node count and pruned count.",
    )
    p.add_argument("stores", nargs="+", metavar="STORE", help="store specs to list")
    _json_flag(p)

    p = add(
        "show",
        "print the tree of a run",
        "Print the tree under ROOT, one line per node: kind, short id, label, charges and "
        "markers. Content-free unless --payloads is given.",
    )
    p.add_argument("store", metavar="STORE", help="the store spec")
    p.add_argument("root", metavar="ROOT", help=_ROOT_HELP)
    p.add_argument("--payloads", action="store_true", help="include payloads and results")
    p.add_argument("--unicode", action="store_true", help="draw the tree with box characters")
    p.add_argument("--html", metavar="FILE", help="write a static HTML page to FILE instead")
    _json_flag(p)

    p = add(
        "report",
        "summarise the charges of a run",
        "Print the node count and the spent and avoided charges (summed from node metadata) "
        "of the subtree under ROOT.",
    )
    p.add_argument("store", metavar="STORE", help="the store spec")
    p.add_argument("root", metavar="ROOT", help=_ROOT_HELP)
    _json_flag(p)

    p = add(
        "verify",
        "check ids, result digests, ancestry and the budget ledger",
        "Recompute every node id and result digest and check parent links, for every run or "
        "for the subtree under ROOT and its ancestry, and check the ledger rows budget checks "
        "read (totals, reservations, window events). Exits 1 when there are findings.",
    )
    p.add_argument("store", metavar="STORE", help="the store spec")
    p.add_argument("root", metavar="ROOT", nargs="?", help=f"{_ROOT_HELP} (default: all runs)")
    _json_flag(p)

    p = add(
        "team-report",
        "charges by agent, task and role",
        "Report the ledger's charges under ROOT (a run, a team or an agent node) by agent, "
        "task and role: each agent's own work (its sub-agents' counted once, under them) and "
        "the work done outside every agent (unattributed).",
    )
    p.add_argument("store", metavar="STORE", help="the store spec")
    p.add_argument("root", metavar="ROOT", help=f"{_ROOT_HELP}, or a team or agent node id")
    _json_flag(p)

    p = add(
        "verify-dependencies",
        "check the references and handoffs between agents",
        "Check every dependency and handoff note under ROOT: each referenced node must be "
        "stored, verify against its content and hold the result it held when referenced; "
        "each handoff's agent must be stored. Exits 1 when there are findings.",
    )
    p.add_argument("store", metavar="STORE", help="the store spec")
    p.add_argument("root", metavar="ROOT", help=_ROOT_HELP)
    _json_flag(p)

    p = add(
        "seal",
        "compute the seal of a subtree",
        "Compute the rolling SHA-256 seal over the subtree under ROOT (ids and result "
        "digests, each node validated first) and print its digest.",
    )
    p.add_argument("store", metavar="STORE", help="the store spec")
    p.add_argument("root", metavar="ROOT", help=_ROOT_HELP)
    p.add_argument("--output", metavar="FILE", help="also write the full seal report to FILE")
    _json_flag(p)

    p = add(
        "merge",
        "copy runs from other stores into DEST",
        "Copy every node of each SRC store that DEST lacks, parents first. Existing nodes keep "
        "their result and gain a union of metadata; differing results and conflicting metadata "
        "values are recorded in metadata, never overwritten. Sources are verified before "
        "anything is written; merging twice changes nothing.",
    )
    p.add_argument("dest", metavar="DEST", help="the destination store spec (created if missing)")
    p.add_argument("sources", nargs="+", metavar="SRC", help="source store specs")
    p.add_argument(
        "--replay",
        action="store_true",
        help="refuse (exit 1, nothing written) when a source result differs from DEST",
    )
    _json_flag(p)

    p = add(
        "gc",
        "offline garbage collection",
        "drop-pruned deletes every pruned node with its descendants; compact deletes "
        "unreferenced interned blobs and expired reservations and vacuums the file. Every run "
        "is sealed first (a tampered store stops gc with exit 1) and the surviving runs' seals "
        "are reported. Run it while no writer is active.",
    )
    p.add_argument("store", metavar="STORE", help="the store spec")
    p.add_argument("mode", choices=["drop-pruned", "compact"], help="what to collect")
    _json_flag(p)

    p = add(
        "export",
        "write a sealed subtree file",
        "Write the subtree under ROOT to FILE as pollard/subtree/v1 JSON with its seal.",
    )
    p.add_argument("store", metavar="STORE", help="the store spec")
    p.add_argument("root", metavar="ROOT", help=_ROOT_HELP)
    p.add_argument("file", metavar="FILE", help="the file to write")
    _json_flag(p)

    p = add(
        "import",
        "verify a subtree file and write it into a store",
        "Read a pollard/subtree/v1 file, rebuild and re-seal it, and write it into STORE only "
        "when everything verifies (ids, digests, order, seal) and nothing conflicts with what "
        "STORE holds.",
    )
    p.add_argument("file", metavar="FILE", help="the subtree file")
    p.add_argument("store", metavar="STORE", help="the store spec (created if missing)")
    p.add_argument(
        "--expect-seal",
        metavar="DIGEST",
        help="also require the seal digest to equal DIGEST (kept apart from the file)",
    )
    _json_flag(p)

    p = add(
        "migrate",
        "bring a pollard 0.8 store into this version's layout",
        "With DST: copy the pollard 0.8 SQLite file SRC into the new file DST (SRC is only "
        "read). Without: migrate SRC (a SQLite file or a PostgreSQL store spec) in place, in "
        "one transaction, keeping the 0.8 data (FILE.pollard-0.8.bak, or the pollard08_* "
        "tables). Every node is rebuilt and checked against its id and result digest; settled "
        "ledger totals and window events are carried over. Prints each run's seal (equal to "
        "0.8's).",
    )
    p.add_argument("src", metavar="SRC", help="the pollard 0.8 store (file or store spec)")
    p.add_argument(
        "dst", metavar="DST", nargs="?", help="a new SQLite file to copy into (must not exist)"
    )
    _json_flag(p)

    p = add(
        "approvals",
        "list approval requests",
        "List the approval requests recorded in STORE (one walk over every run): request id, "
        "run, actor, action, argument digest, status and whether the approval was spent. "
        "Pending requests by default.",
    )
    p.add_argument("store", metavar="STORE", help="the store spec")
    p.add_argument(
        "--status",
        choices=["pending", "approved", "denied", "all"],
        default="pending",
        help="which requests to list (default: pending)",
    )
    p.add_argument("--run", metavar="LABEL", help="only the requests of this run")
    _json_flag(p)

    for name, verb in (("approve", "approve"), ("deny", "deny")):
        p = add(
            name,
            f"{verb} a pending approval request",
            f"Record the decision to {verb} REQUEST, exactly once: a request that is already "
            "decided is refused (exit 2) and its standing decision named. The actor who asked "
            "cannot decide its own request. An approved call runs once when it is made again.",
        )
        p.add_argument("store", metavar="STORE", help="the store spec")
        p.add_argument(
            "request", metavar="REQUEST", help="an approval request id or a unique id prefix"
        )
        p.add_argument("--by", required=True, metavar="NAME", help="who decides (recorded)")
        p.add_argument("--reason", metavar="TEXT", help="why (recorded with the decision)")
        _json_flag(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pollard`` command line.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when omitted.

    Returns:
        The process exit code: 0 ok, 1 integrity findings, 2 usage or input errors.
    """
    from ._cli.commands import run_command

    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(args_list)
    except CLIError as exc:
        sys.stderr.write(f"pollard: {exc}\n")
        return 2
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    return run_command(args)


if __name__ == "__main__":
    raise SystemExit(main())
