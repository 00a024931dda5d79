"""What the command reads: configuration, sources, prompt files, schemas and job handles."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pollux import Config, ConfigurationError, DeferredHandle, PolluxError, Source
from pollux.config import API_KEY_ENV_VARS, KEY_MISSING
from pollux.interaction._schema_check import check_schema

from .errors import CLIError

__all__ = [
    "MOCK_MODEL",
    "MOCK_PROVIDER",
    "REPLAY_KEY",
    "build_config",
    "check_new_handle",
    "decimal_option",
    "error_hint",
    "load_schema",
    "number_option",
    "parse_sources",
    "read_handle",
    "read_job",
    "read_prompts",
    "regular_file",
    "whole_number_option",
    "write_handle",
]

MOCK_PROVIDER = "openai"
MOCK_MODEL = "gpt-5-nano"

# Replay answers from the ledger and never calls the provider, so it needs no credentials: when
# none are configured these stand in (they are never sent anywhere).
REPLAY_KEY = "pollux-replay-sends-nothing"
_REPLAY_BASE_URL = "http://127.0.0.1:9/replay-sends-nothing"


def error_hint(error: PolluxError, *, offline: bool = False) -> CLIError:
    """A pollux usage error as the command's one-line error (its hint kept).

    A missing API key is the exception: the library's hint says ``api_key=...`` /
    ``use_mock=True``, which a shell user cannot pass; this one names the variable (and
    ``--mock`` when ``offline`` applies to the command).
    """
    if error.message.startswith(KEY_MISSING):
        provider = error.message.removeprefix(KEY_MISSING).split(" ", 1)[0]
        env_var = API_KEY_ENV_VARS.get(provider)
        if env_var is not None:
            hint = f"export {env_var} in this shell (or put it in a .env file)"
            return CLIError(error.message, hint=hint + (", or pass --mock" if offline else ""))
    return CLIError(error.message, hint=error.hint)


# A usual value for each option that counts, for the hint of a refused one.
_COUNT_EXAMPLES = {
    "--max-output-tokens": "1024",
    "--concurrency": "8",
    "--quota-rpm": "500",
    "--quota-tpm": "200000",
    "--quota-workers": "8",
    "--max-calls": "100",
}


def whole_number_option(text: str, option: str, *, least: int = 1) -> int:
    """Parse an option that takes a whole number >= ``least`` (``1e3`` and ``1000.0`` too).

    Every option that counts refuses in one voice ("needs a whole number >= 1"), whatever was
    wrong with the value (a fraction, a negative, a word, infinity).
    """
    try:
        number = Decimal(text)
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite() or number != number.to_integral_value() or number < least:
        raise CLIError(
            f"{option} needs a whole number >= {least}, got {text!r}",
            hint=f"pass {option} {_COUNT_EXAMPLES.get(option, '60')}",
        )
    return int(number)


def number_option(text: str, option: str) -> float:
    """Parse an option that takes a number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise CLIError(
            f"{option} needs a number > 0, got {text!r}", hint=f"pass {option} 30, for example"
        )
    return value


def decimal_option(text: str, option: str) -> Decimal:
    """Parse a budget limit: an exact decimal >= 0."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        value = Decimal(-1)
    if not value.is_finite() or value < 0:
        raise CLIError(
            f"{option} needs a number >= 0, got {text!r}", hint=f"pass {option} 10, for example"
        )
    return value


def build_config(args: argparse.Namespace, *, concurrency: int = 6, replay: bool = False) -> Config:
    """The Config from the flags and the usual environment variables.

    Args:
        args: The parsed command line (``--provider``, ``--model``, ``--base-url``, ``--mock``).
        concurrency: ``request_concurrency``.
        replay: Answers come from a ledger: missing credentials are not an error.

    Raises:
        CLIError: No provider, or pollux refused the configuration (with its hint).
    """
    provider = args.provider or os.environ.get("POLLUX_PROVIDER") or None
    model = args.model or os.environ.get("POLLUX_MODEL") or None
    if args.mock:
        provider = provider or MOCK_PROVIDER
        model = model or (MOCK_MODEL if provider != "local" else None)
    if provider is None:
        raise CLIError(
            "no provider configured",
            hint="pass --provider P --model M (or set POLLUX_PROVIDER and POLLUX_MODEL), "
            "or --mock for an offline run",
        )
    options: dict[str, Any] = {
        "provider": provider,
        "model": model,
        "base_url": args.base_url or None,
        "use_mock": bool(args.mock),
        "request_concurrency": concurrency,
    }
    if not replay:
        from .options import quota_from
        from .progress import QuotaWatch

        quota = quota_from(args)
        if quota is not None:
            options["quota"] = QuotaWatch(quota)  # so the progress display can show its waits
    try:
        return Config(**options)
    except ConfigurationError as exc:
        if not replay or args.mock:
            raise error_hint(exc, offline=True) from None
    # Replay: the same request identity without credentials (they are not part of it).
    if provider in ("local", "azure_openai"):
        options["base_url"] = options["base_url"] or _REPLAY_BASE_URL
    if provider not in ("local", "vertex"):  # Vertex takes Google Cloud credentials, no key
        options["api_key"] = REPLAY_KEY
    try:
        return Config(**options)
    except ConfigurationError as exc:
        raise error_hint(exc) from None


def _url_source(text: str) -> Source:
    host = (urlsplit(text).hostname or "").lower()
    if host in {"youtube.com", "www.youtube.com", "youtu.be", "m.youtube.com"}:
        return Source.from_youtube(text)
    if host in {"arxiv.org", "www.arxiv.org"}:
        return Source.from_arxiv(text)
    import mimetypes

    mime, _ = mimetypes.guess_type(urlsplit(text).path)
    return Source.from_uri(text, mime_type=mime or "application/octet-stream")


def parse_sources(items: list[str]) -> list[Source]:
    """One Source per ``--source``: http(s) URLs by reference, anything else a local file.

    Raises:
        CLIError: A file is missing or unreadable (with pollux's hint).
    """
    sources: list[Source] = []
    for item in items:
        try:
            scheme = urlsplit(item).scheme
        except ValueError as exc:  # 'http://[::1': an unclosed IPv6 bracket
            raise CLIError(
                f"--source {item}: not a valid URL ({exc})", hint="check the URL"
            ) from None
        try:
            if scheme in {"http", "https"}:
                sources.append(_url_source(item))
            else:
                sources.append(Source.from_file(item))
        except PolluxError as exc:
            raise CLIError(f"--source {item}: {exc.message}", hint=exc.hint) from None
    return sources


def regular_file(
    path: str, what: str, *, missing_ok: bool = False, hint: str = "pass a regular file"
) -> None:
    """Refuse a path that exists but is not a regular file before it is opened.

    A FIFO blocks ``open`` until a writer (or reader) arrives, and ``/dev/zero`` never ends:
    either would hang the command. Sockets and devices are refused the same way.

    Raises:
        CLIError: The path is missing (unless ``missing_ok``), a directory, or not a regular file.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if missing_ok:
            return
        raise CLIError(f"{what} not found: {path}", hint="check the path") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise CLIError(f"cannot read {what} {path}: {reason}", hint="check the path") from None
    if stat.S_ISDIR(mode):
        raise CLIError(f"{what} is a directory: {path}", hint="pass a file")
    if not stat.S_ISREG(mode):
        raise CLIError(
            f"{what} is not a regular file: {path} (a FIFO, socket or device)", hint=hint
        )


def read_stdin(what: str) -> str:
    """Standard input as UTF-8 text (invalid bytes are refused, as they are in a file).

    Raises:
        CLIError: The bytes are not UTF-8.
    """
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream (tests, embedding): already decoded
        return sys.stdin.read()
    try:
        return bytes(buffer.read()).decode("utf-8")
    except UnicodeDecodeError:
        raise CLIError(f"{what} on stdin is not UTF-8 text", hint="send UTF-8 text") from None


def parse_json(text: str, where: str, hint: str) -> Any:
    """``json.loads(text)``, every failure one CLIError naming ``where``.

    Besides malformed JSON, the parser raises ``ValueError`` for an integer of more than 4,300
    digits and ``RecursionError`` for nesting about 1,000 deep: neither may reach the user as a
    traceback.

    Raises:
        CLIError: The text is not JSON, holds a huge integer, or nests too deeply.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})", hint=hint) from None
    except ValueError:  # an integer too long to convert
        raise CLIError(
            f"{where}: holds an integer of more than {sys.get_int_max_str_digits():,} digits",
            hint=hint,
        ) from None
    except RecursionError:
        raise CLIError(f"{where}: JSON nested too deeply", hint=hint) from None


def _read_text(path: str, what: str) -> str:
    if path == "-":
        return read_stdin(what)
    regular_file(path, what, hint="pass a regular file, or '-' to read stdin")
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CLIError(f"{what} not found: {path}", hint="check the path") from None
    except IsADirectoryError:
        raise CLIError(f"{what} is a directory: {path}", hint="pass a file") from None
    except UnicodeDecodeError:
        raise CLIError(f"{what} is not UTF-8 text: {path}", hint="save it as UTF-8") from None
    except OSError as exc:
        raise CLIError(
            f"cannot read {what} {path}: {exc.strerror}", hint="check its permissions"
        ) from None


def read_prompts(path: str) -> list[str]:
    """The prompts of a file: JSONL objects with a ``prompt`` key, or one prompt a line.

    A file whose first non-blank line starts with ``{`` is JSONL; otherwise every non-blank line
    is a prompt. Blank lines are skipped in both; a prompt's index is its position among the
    prompts (from 0).

    Raises:
        CLIError: The file is missing, empty, or a JSONL line is not an object with a non-empty
            string ``prompt``.
    """
    text = _read_text(path, "prompts file")
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise CLIError(
            f"no prompts in {path}",
            hint='write one prompt a line, or JSONL objects like {"prompt": "..."}',
        )
    if not lines[0][1].lstrip().startswith("{"):
        return [line for _, line in lines]
    prompts: list[str] = []
    for number, line in lines:
        item = parse_json(
            line, f"{path}:{number}", hint="a JSONL prompts file has one JSON object a line"
        )
        prompt = item.get("prompt") if isinstance(item, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise CLIError(
                f"{path}:{number}: needs a non-empty string 'prompt'",
                hint='write each line as {"prompt": "..."}',
            )
        prompts.append(prompt)
    return prompts


def load_schema(path: str | None) -> dict[str, Any] | None:
    """The JSON Schema of ``--schema FILE.json``, or None.

    Raises:
        CLIError: The file is missing or is not a JSON object.
    """
    if path is None:
        return None
    text = _read_text(path, "schema file")
    schema = parse_json(text, f"--schema {path}", hint="pass a JSON Schema object")
    if not isinstance(schema, dict):
        raise CLIError(f"--schema {path}: not a JSON object", hint="pass a JSON Schema object")
    try:  # before any call: a misspelt type would otherwise come back as a silent null
        check_schema(schema, what=f"--schema {path}")
    except ConfigurationError as exc:
        raise CLIError(exc.message, hint="fix the schema file (the path names the spot)") from None
    return schema


def read_job(path: str) -> dict[str, Any]:
    """The JSON object saved in a handle file (a handle, or a governed job from ``--ledger``).

    Raises:
        CLIError: The file is missing or is not a JSON object.
    """
    text = _read_text(path, "handle file")
    data = parse_json(text, path, hint="pass the file 'pollux defer --handle' wrote")
    if not isinstance(data, dict):
        raise CLIError(f"{path}: not a saved handle", hint="pass the file 'pollux defer' wrote")
    return data


def read_handle(path: str) -> DeferredHandle:
    """The DeferredHandle saved in ``path`` (also inside a governed job's file).

    Raises:
        CLIError: The file is missing or is not a saved handle.
    """
    text = _read_text(path, "handle file")
    data = parse_json(text, path, hint="pass the file 'pollux defer --handle' wrote")
    try:
        if isinstance(data, dict) and "governed_job" in data:  # written by defer --ledger
            data = data.get("handle")
        return DeferredHandle.from_dict(data)
    except ConfigurationError as exc:
        raise CLIError(f"{path}: {exc.message}", hint=exc.hint) from None


def check_new_handle(path: str) -> Path:
    """Check that ``--handle`` can be written without losing an earlier job's handle.

    Raises:
        CLIError: The file exists (its job would be lost) or its folder does not.
    """
    target = Path(path)
    if target.exists():
        raise CLIError(
            f"--handle {path} already exists",
            hint="its job would be lost: collect or cancel it first, or choose another file",
        )
    if not target.parent.is_dir():
        raise CLIError(
            f"--handle {path}: folder {target.parent} does not exist",
            hint="create the folder first, or choose another file",
        )
    return target


def write_handle(target: Path, handle: DeferredHandle | Mapping[str, Any]) -> None:
    """Write ``handle.to_dict()`` (or JSON data) to ``target`` atomically (a rename)."""
    data = handle.to_dict() if isinstance(handle, DeferredHandle) else dict(handle)
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, target)
