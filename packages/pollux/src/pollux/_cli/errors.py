"""The command line's own error: a usage or input problem, reported in one line with a hint."""

from __future__ import annotations

import re
import sys

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CLIError",
    "report",
    "shell_hint",
]

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
        damaged_ledger: The ledger holds rows pollard cannot trust: no cost line is built from it
            after this error.
        cost_line: Whether the ledger's cost line follows the error (False when the command
            never got to write: the line would only repeat another command's figures).
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        code: int = EXIT_USAGE,
        damaged_ledger: bool = False,
        cost_line: bool = True,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.damaged_ledger = damaged_ledger
        self.cost_line = cost_line and not damaged_ledger
        self.code = code


# The library's and pollard's hints are written for Python code (``Config(api_key=...)``,
# ``run.report()``); a shell user can only pass flags and set variables, so the command says those.
_SHELL_HINTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r" \(or pass (Config\()?api_key=\.\.\.\)?\)", ""),
        (r"pass Config\(api_key=\.\.\.\)", "set the provider's key variable"),
        (r"Config\.base_url / ", "--base-url / "),
        (r"base_url='([^']*)'", r"--base-url \1"),
        (r"Config\(provider='(\w+)', model='([^']*)'\)", r"--provider \1 --model \2"),
        (r"(for example )?model='([^']*)'", r"--model \2 (or POLLUX_MODEL)"),
        (r"use_mock=True", "--mock"),
        (r"Config\.request_concurrency", "--concurrency"),
        (r"inspect run\.report\(\)", "run 'pollard report STORE LABEL'"),
        (r"run\.report\(\)", "'pollard report STORE LABEL'"),
        # The quota's (``--quota-*``): SharedQuota's and the pacing's keywords.
        (r"pass on_unreachable='local' with workers=N", "pass --quota-workers N"),
        (r"a smaller max_tokens on the call", "a smaller --max-output-tokens"),
        (r"the quota's tokens limit", "--quota-tpm"),
        (
            r"Raise RetryPolicy\.max_elapsed_s \(None waits as long as the quota needs\), "
            r"lower request_concurrency,",
            "Lower --concurrency,",
        ),
    )
)


def shell_hint(hint: str) -> str:
    """A library hint in the shell's terms: flags and variables instead of Python calls."""
    for pattern, replacement in _SHELL_HINTS:
        hint = pattern.sub(replacement, hint)
    return hint


def report(error: CLIError) -> int:
    """Print ``error`` as ``pollux: MESSAGE`` and ``hint: HINT`` on stderr; return its exit code."""
    sys.stderr.write(f"pollux: {error.message}\n")
    sys.stderr.write(f"hint: {shell_hint(error.hint or 'see pollux --help')}\n")
    sys.stderr.flush()
    return error.code
