"""The ``pollard`` command line (standard library only)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pollard`` command line.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when omitted.

    Returns:
        The process exit code.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args in ([], ["--help"], ["-h"]):
        sys.stdout.write("usage: pollard COMMAND ...\n\nCommands are added by the tooling work.\n")
        return 0
    sys.stderr.write(f"pollard: unknown command {args[0]!r}\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
