"""The command line's own error: a usage or input problem, reported in one line with a hint."""

from __future__ import annotations

import sys

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "CLIError", "report"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CLIError(Exception):
    """A usage or input error: printed as ``pollux: MESSAGE`` plus ``hint: ...``, exit code 2.

    Args:
        message: What is wrong, in one line.
        hint: How to fix it.
        code: The exit code (2 unless the problem is an outcome rather than the input).
    """

    def __init__(self, message: str, *, hint: str | None = None, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code


def report(error: CLIError) -> int:
    """Print ``error`` as ``pollux: MESSAGE`` and ``hint: HINT`` on stderr; return its exit code."""
    sys.stderr.write(f"pollux: {error.message}\n")
    sys.stderr.write(f"hint: {error.hint or 'see pollux --help'}\n")
    sys.stderr.flush()
    return error.code
