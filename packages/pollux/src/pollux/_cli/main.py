"""The ``pollux`` command line: ask, fan out, defer and collect from the shell.

Commands (``pollux COMMAND --help`` for each)::

    ask PROMPT                 one answer: the text on stdout, or the Output as JSON
    many PROMPTS_FILE          many prompts over shared sources, answers written as they arrive
    defer PROMPTS_FILE         submit a deferred (batch) job and save its handle to a file
    status JOB.json            the job's normalized status and counts
    collect JOB.json           the job's answers (optionally waiting until it is terminal)
    cancel JOB.json            ask the provider to cancel the job
    check                      can the configured provider be reached right now?

Exit codes: 0 every prompt answered, 1 some prompts failed or were refused (or a job is not
ready), 2 usage or input errors (one ``pollux: ...`` line and a hint on stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from pollux._version import __version__

from .errors import CLIError, report

__all__ = ["build_parser", "main"]

_EPILOG = (
    "Configuration: --provider/--model, or POLLUX_PROVIDER and POLLUX_MODEL; keys from the "
    "provider's variable (OPENAI_API_KEY, GEMINI_API_KEY, ANTHROPIC_API_KEY, "
    "OPENROUTER_API_KEY, AZURE_OPENAI_API_KEY, or .env); local servers from --base-url or "
    "POLLUX_LOCAL_BASE_URL, an Azure OpenAI endpoint from --base-url or AZURE_OPENAI_ENDPOINT. "
    "Exit codes: 0 all answered, 1 some failed or refused, 2 usage or input errors, "
    "130 interrupted."
)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors become one ``pollux: ...`` line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise CLIError(message, hint=f"see '{self.prog} --help'")


def _provider_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("provider")
    g.add_argument(
        "--provider",
        metavar="P",
        help="gemini, openai, anthropic, openrouter, local, azure_openai or vertex "
        "(default: $POLLUX_PROVIDER; vertex reads $GOOGLE_CLOUD_PROJECT, "
        "$GOOGLE_CLOUD_LOCATION and the Application Default Credentials)",
    )
    g.add_argument("--model", metavar="M", help="the provider's model (default: $POLLUX_MODEL)")
    g.add_argument(
        "--base-url",
        metavar="URL",
        help="an OpenAI-compatible server, for --provider local (default: $POLLUX_LOCAL_BASE_URL), "
        "the resource endpoint for azure_openai (default: $AZURE_OPENAI_ENDPOINT), "
        "or a gateway for vertex (default: $GOOGLE_VERTEX_BASE_URL)",
    )
    g.add_argument(
        "--mock",
        action="store_true",
        help="use pollux's offline mock provider (no key, no network; placeholder answers); "
        "provider and model default to openai and gpt-5-nano",
    )


def _prompt_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="PATH|URL",
        help="a file or URL every prompt sees (repeat for several)",
    )
    p.add_argument("--instructions", metavar="TEXT", help="a system-level instruction")
    p.add_argument(
        "--schema",
        metavar="FILE.json",
        help="a JSON Schema file: ask for structured output that validates against it",
    )


def _quota_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("provider quota (shared by every worker that names the same store)")
    g.add_argument(
        "--quota-rpm", metavar="N", help="pace calls to N requests per minute (waits, never 429s)"
    )
    g.add_argument(
        "--quota-tpm",
        metavar="N",
        help="pace calls to N tokens per minute (each call holds its input estimate plus its "
        "output cap until it answers)",
    )
    g.add_argument(
        "--quota-store",
        metavar="STORE",
        help="share the quota through a pollard store: a SQLite file for one machine, "
        "postgresql://...#store_id for many hosts (default: this process only)",
    )
    g.add_argument(
        "--quota-window",
        metavar="S",
        help="the quota's window in seconds, for limits that are not per minute (default: 60)",
    )
    g.add_argument(
        "--quota-name", metavar="NAME", help="the shared quota's name (default: 'default')"
    )
    g.add_argument(
        "--quota-workers",
        metavar="N",
        help="how many workers share the quota: when the store is unreachable, run on 1/N of "
        "it instead of failing (default: fail closed)",
    )


def _ledger_options(p: argparse.ArgumentParser, label: str) -> None:
    g = p.add_argument_group("governance (pollard)")
    g.add_argument(
        "--ledger",
        metavar="STORE",
        help="record every call as a governed pollard step in STORE: a SQLite file, or "
        "postgresql://...#store_id",
    )
    g.add_argument(
        "--label",
        metavar="LABEL",
        help=f"the pollard run label (default: {label}); its budget and recordings are shared "
        "by every command that uses the label",
    )
    g.add_argument(
        "--max-usd",
        metavar="USD",
        help="the run's dollar budget: hard with --max-output-tokens (each call's worst case, "
        "priced, is held before it is sent), else estimated (calls are refused once the run "
        "spent USD dollars, so calls in flight may pass it)",
    )
    g.add_argument(
        "--max-tokens",
        metavar="N",
        help="the run's token budget: hard with --max-output-tokens (each call's worst case is "
        "held before it is sent), else estimated (output tokens are charged after each call)",
    )
    g.add_argument("--max-calls", metavar="N", help="the run's budget of provider calls")
    g.add_argument(
        "--replay",
        action="store_true",
        help="answer from the ledger only, without calling any provider",
    )


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the ``pollux`` command.

    Returns:
        The parser; every command is a sub-parser with its own ``--help``.
    """
    parser = _Parser(
        prog="pollux",
        description="Ask, fan out, defer and collect LLM work from the shell, optionally "
        "governed into a pollard ledger.",
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"pollux {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=description, epilog=_EPILOG)

    p = add(
        "ask",
        "ask one question",
        "Run one prompt and print the answer's text (the structured value as JSON with "
        "--schema), or the whole Output as JSON with --json. PROMPT '-' reads it from stdin.",
    )
    p.add_argument("prompt", metavar="PROMPT", help="the prompt ('-' reads stdin)")
    _prompt_options(p)
    p.add_argument(
        "--max-output-tokens",
        metavar="N",
        help="cap each answer at N output tokens (sent as max_tokens); with --max-tokens it "
        "makes the token budget hard: each call holds its input estimate plus N before it is sent",
    )
    p.add_argument("--json", action="store_true", help="print the Output as JSON")
    _provider_options(p)
    _quota_options(p)
    _ledger_options(p, "'pollux ask'")

    p = add(
        "many",
        "run many prompts over shared sources",
        "Run every prompt of PROMPTS_FILE (one a line, or JSONL objects with a 'prompt' key) "
        "over the shared sources. Each answer is written as one JSON line as soon as it "
        "arrives, with its prompt index, status and usage. Failed prompts do not stop the "
        "others; Ctrl-C stops cleanly; re-running with the same --out skips the prompts "
        "already answered.",
    )
    p.add_argument("prompts_file", metavar="PROMPTS_FILE", help="the prompts ('-' reads stdin)")
    _prompt_options(p)
    p.add_argument(
        "--out",
        metavar="FILE.jsonl",
        help="append the records to FILE and resume from it (default: stdout, no resume)",
    )
    p.add_argument(
        "--concurrency",
        metavar="N",
        default="6",
        help="how many provider calls run at once (default: 6)",
    )
    p.add_argument(
        "--max-output-tokens",
        metavar="N",
        help="cap each answer at N output tokens (sent as max_tokens); with --max-tokens it "
        "makes the token budget hard: each call holds its input estimate plus N before it is sent",
    )
    _provider_options(p)
    _quota_options(p)
    _ledger_options(p, "'pollux many NAME' with the prompts file's name")

    p = add(
        "defer",
        "submit a deferred (batch) job",
        "Submit every prompt of PROMPTS_FILE as one deferred job on the provider's batch API "
        "and save the job's handle to --handle (the file DeferredHandle.to_dict() writes). "
        "Collect it later with 'pollux collect'.",
    )
    p.add_argument("prompts_file", metavar="PROMPTS_FILE", help="the prompts ('-' reads stdin)")
    _prompt_options(p)
    p.add_argument(
        "--handle", metavar="JOB.json", required=True, help="where to save the job handle"
    )
    _provider_options(p)
    p.add_argument(
        "--max-output-tokens",
        metavar="N",
        help="cap each answer at N output tokens (needed with --ledger: it bounds the job's "
        "worst case, which the budget reserves at submit)",
    )
    _ledger_options(p, "'pollux defer'")

    p = add(
        "status",
        "show a deferred job's status",
        "Inspect the job of JOB.json and print its normalized status and its succeeded, "
        "failed and pending counts.",
    )
    p.add_argument("handle", metavar="JOB.json", help="the handle file written by 'pollux defer'")
    p.add_argument("--json", action="store_true", help="print the snapshot as JSON")

    p = add(
        "collect",
        "collect a deferred job's answers",
        "Collect the answers of the job of JOB.json as JSON lines (the same records as "
        "'pollux many'). A job that is still running exits 1 unless --wait polls it until "
        "it is terminal.",
    )
    p.add_argument("handle", metavar="JOB.json", help="the handle file written by 'pollux defer'")
    p.add_argument(
        "--out", metavar="FILE.jsonl", help="write the records to FILE (default: stdout)"
    )
    p.add_argument("--wait", action="store_true", help="poll until the job is terminal")
    p.add_argument(
        "--poll-seconds",
        metavar="N",
        default="30",
        help="seconds between polls with --wait (default: 30)",
    )
    p.add_argument(
        "--timeout",
        metavar="N",
        help="with --wait: give up after N seconds (exit 1; the job keeps running and can be "
        "collected later); default: wait until the job is terminal",
    )
    p.add_argument(
        "--schema",
        metavar="FILE.json",
        help="the JSON Schema given to 'pollux defer', to rebuild the structured answers",
    )
    g = p.add_argument_group("governance (pollard)")
    g.add_argument(
        "--ledger",
        metavar="STORE",
        help="settle the job submitted with 'pollux defer --ledger' in STORE: its answers' "
        "actual cost replaces the worst case reserved at submit (once, however often you collect)",
    )
    g.add_argument(
        "--replay",
        action="store_true",
        help="answer from the ledger only (a job collected there before), without any provider",
    )

    p = add(
        "cancel",
        "cancel a deferred job",
        "Ask the provider to cancel the job of JOB.json; the final status stays "
        "provider-driven ('pollux status' shows it).",
    )
    p.add_argument("handle", metavar="JOB.json", help="the handle file written by 'pollux defer'")

    p = add(
        "check",
        "check that the provider is ready",
        "Check that the configured provider can be reached (a local server answers and lists "
        "the model; a cloud provider's key is set) and print what was checked, or what is "
        "wrong and how to fix it. Exits 1 when it is not ready.",
    )
    _provider_options(p)
    p.add_argument("--json", action="store_true", help="print the readiness as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pollux`` command line.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when omitted.

    Returns:
        The exit code: 0 all answered, 1 some failed or refused, 2 usage or input errors,
        130 interrupted.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(args_list)
    except CLIError as exc:
        return report(exc)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    for name in ("prompt", "instructions", "label", "provider", "model", "base_url"):
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # bytes that are not UTF-8, kept as surrogates
                option = "PROMPT" if name == "prompt" else f"--{name.replace('_', '-')}"
                return report(CLIError(f"{option} is not UTF-8 text", hint="pass UTF-8 text"))
    try:
        from .commands import run_command
    except ImportError as exc:  # the cli extra is not installed
        return report(
            CLIError(
                f"the pollux command needs its extra ({exc.name} is missing)",
                hint='pip install "pollux-ai[cli]"',
            )
        )
    try:
        return run_command(args)
    except CLIError as exc:
        return report(exc)
    except KeyboardInterrupt:
        sys.stderr.write("pollux: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (`pollux many q.txt | head -1`): stop quietly, like other tools;
        # stdout is pointed at devnull so the interpreter's final flush does not fail again.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
