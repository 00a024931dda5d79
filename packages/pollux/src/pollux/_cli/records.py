"""The JSON lines the command writes (one per answered, failed or refused prompt) and resume."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pollux import Output

from .errors import CLIError, shell_hint

__all__ = ["STATUSES", "Record", "RecordSink", "answered_indexes", "jsonable", "record_for"]

#: A record's ``status``: answered, failed (the call or the request failed), refused (a budget
#: refused it before any provider call), or missing (``--replay`` found no recording).
STATUSES = ("ok", "failed", "refused", "missing")


@dataclass
class Record:
    """One prompt's outcome, as one JSON line."""

    index: int
    status: str
    output: Output | None = None
    prompt: str | None = None
    error: dict[str, Any] | None = None
    node: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """Input plus output tokens (0 when nothing was answered)."""
        return 0 if self.output is None else self.output.usage.total_tokens

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the line (keys in a stable order)."""
        line: dict[str, Any] = {"index": self.index, "status": self.status}
        if self.prompt is not None:
            line["prompt"] = self.prompt
        if self.output is not None and self.status == "ok":
            line["text"] = self.output.text
            if self.output.structured is not None:
                line["structured"] = jsonable(self.output.structured)
            line["completion"] = self.output.metrics.completion_status
        if self.output is not None:
            line["usage"] = self.output.usage.to_jsonable()
        if self.error is not None:
            line["error"] = self.error
        if self.node is not None:
            line["node"] = self.node
        line.update(self.extra)
        return line


def jsonable(structured: Any) -> Any:
    """A structured answer as JSON data (a pydantic model is dumped, JSON data stays)."""
    dump = getattr(structured, "model_dump", None)
    return dump(mode="json") if callable(dump) else structured


def _error_of(output: Output) -> dict[str, Any]:
    error = output.diagnostics.error or {}
    names: tuple[str, ...] = ("type", "message", "hint", "refusal_id")
    kept: dict[str, Any] = {key: error[key] for key in names if key in error}
    if isinstance(kept.get("hint"), str):
        kept["hint"] = shell_hint(kept["hint"])
    return kept or {"type": "Error", "message": "the call failed without an error record"}


def record_for(index: int, output: Output, *, prompt: str | None = None) -> Record:
    """The record of one Output: ok, or failed/refused with its error's type, message and hint."""
    if not output.failed:
        return Record(index, "ok", output, prompt)
    error = _error_of(output)
    status = "refused" if error.get("type") == "BudgetExceeded" else "failed"
    return Record(index, status, output, prompt, error=error)


def answered_indexes(path: Path, prompts: list[str]) -> set[int]:
    """The prompts that an earlier run already answered into ``path`` (for resume).

    The latest record of an index counts, so a prompt that failed and was answered later is
    done, and one answered then failed again (not possible through this command) is not. A
    torn last line (a run killed mid-write) is cut off so the next record starts cleanly.

    Raises:
        CLIError: ``path`` holds records of other prompts (a different prompts file).
    """
    if not path.exists():
        return set()
    if path.is_dir():
        raise CLIError(f"--out {path} is a directory", hint="pass a file name")
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with path.open("r+b") as handle:
            handle.truncate(end)
    latest: dict[int, str] = {}
    for number, raw in enumerate(data[:end].splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            index, status = line["index"], line["status"]
        except (ValueError, KeyError, TypeError):
            raise CLIError(
                f"--out {path}:{number} is not a pollux record",
                hint="resume only appends to files written by 'pollux many'; choose another --out",
            ) from None
        if not isinstance(index, int) or not 0 <= index < len(prompts):
            raise CLIError(
                f"--out {path}:{number} is for prompt {index}, which this prompts file lacks",
                hint="the file was written for other prompts: choose another --out",
            )
        if line.get("prompt") is not None and line["prompt"] != prompts[index]:
            raise CLIError(
                f"--out {path}:{number}: prompt {index} differs from the prompts file",
                hint="the file was written for other prompts: choose another --out",
            )
        latest[index] = status
    return {index for index, status in latest.items() if status == "ok"}


class RecordSink:
    """Writes records to a file (or stdout), one flushed line each, as they arrive.

    Args:
        path: The file, or None for stdout.
        append: Append (``pollux many``, which resumes from the file) or replace its content.
    """

    def __init__(self, path: Path | None, *, append: bool = True) -> None:
        self.path = path
        self.counts = dict.fromkeys(STATUSES, 0)
        self.tokens = 0
        self._file: IO[str]
        if path is None:
            self._file = sys.stdout
        else:
            try:
                self._file = path.open("a" if append else "w", encoding="utf-8")
            except OSError as exc:
                raise CLIError(
                    f"cannot write --out {path}: {exc.strerror}",
                    hint="check that its folder exists and is writable",
                ) from None

    def write(self, record: Record) -> None:
        """Write one record and flush it, so an interrupted run keeps every finished answer."""
        self._file.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
        self._file.flush()
        self.counts[record.status] += 1
        self.tokens += record.tokens

    def close(self) -> None:
        """Close the file (stdout stays open)."""
        if self.path is not None:
            self._file.close()
