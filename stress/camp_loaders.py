"""Loader fuzzing: pollux and pollard JSON loaders raise only their documented errors.

Valid documents are mutated (values swapped for huge integers, NaN and infinities, wrong types,
deep nesting, missing or extra keys) and loaded again. A loader may accept the document or raise
its documented error; anything else (``OverflowError``, ``KeyError``, ``AttributeError``, ...)
escaping a loader is a failure.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pollux
from pollard import (
    HashRopeStore,
    IntegrityError,
    MemoryStore,
    PollardError,
    Runtime,
    export_subtree,
    import_subtree,
)
from pollux import (
    Config,
    ConfigurationError,
    DeferredHandle,
    Output,
    OutputCollection,
    PolluxError,
    RetryPolicy,
)
from stress._report import Deadline, Outcome

SPECIALS: list[Any] = [
    10**400,
    -(10**400),
    float("nan"),
    float("inf"),
    -1,
    0,
    2**63,
    True,
    None,
    "",
    "x" * 10_000,
    [],
    {},
    [[[[[[[[[[[[]]]]]]]]]]]],
    {"__pollard_ref": "0" * 64},
    "\ud800",
]


def _mutate(value: Any, rng: random.Random) -> Any:
    """One random change somewhere in a JSON-like document."""
    doc = copy.deepcopy(value)
    holders: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            holders.extend((item, k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            holders.extend((item, i) for i in range(len(item)))
            stack.extend(item)
    if not holders or rng.random() < 0.05:
        return rng.choice(SPECIALS)
    container, key = rng.choice(holders)
    action = rng.random()
    if action < 0.7:
        container[key] = rng.choice(SPECIALS)
    elif action < 0.85 and isinstance(container, dict):
        del container[key]
    elif isinstance(container, dict):
        container[rng.choice(["extra", "__proto__", ""])] = rng.choice(SPECIALS)
    else:
        container[key] = [container[key]] * 3
    return doc


def _seeds() -> dict[str, Any]:
    config = Config(provider="openai", model="gpt-5-nano", use_mock=True)
    collection = asyncio.run(pollux.run_many(["a?", "b?"], config=config))
    handle = DeferredHandle(
        job_id="batch_1",
        provider="openai",
        model="gpt-5-nano",
        request_count=2,
        submitted_at=1.0,
        schema_hash=None,
        provider_state={"input_file_id": "file_1"},
    )
    retry = {
        "max_attempts": 3,
        "initial_delay_s": 0.5,
        "backoff_multiplier": 2.0,
        "max_delay_s": 5.0,
        "jitter": True,
        "max_elapsed_s": 15.0,
    }
    store = MemoryStore()
    with Runtime(store) as runtime:
        run = runtime.run("seed")
        run.note({"text": "x" * 50, "n": [1, 2.5]})
        run.tool_call("t", {"a": 1}, fn=lambda a: {"ok": True})
        root = run.root_id
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tree.json"
        export_subtree(store, root, out)
        subtree = json.loads(out.read_text())
    log = HashRopeStore()
    with Runtime(log) as runtime:
        runtime.run("log").note({"n": 1})
    lines = [json.loads(line) for line in log.to_bytes().splitlines() if line.strip()]
    return {
        "Output.from_jsonable": collection.outputs[0].to_jsonable(),
        "OutputCollection.from_jsonable": collection.to_jsonable(),
        "DeferredHandle.from_dict": handle.to_dict(),
        "RetryPolicy(**kwargs)": retry,
        "pollard import_subtree": subtree,
        "pollard HashRopeStore(data)": lines,
    }


def _import_subtree(doc: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree.json"
        path.write_text(json.dumps(doc, allow_nan=True), encoding="utf-8", errors="surrogatepass")
        import_subtree(path, MemoryStore())


def _hashrope(doc: Any) -> None:
    lines = doc if isinstance(doc, list) else [doc]
    data = "\n".join(json.dumps(line, allow_nan=True) for line in lines)
    HashRopeStore(data.encode("utf-8", "surrogatepass"))


LOADERS: dict[str, tuple[Callable[[Any], Any], tuple[type[BaseException], ...]]] = {
    "Output.from_jsonable": (Output.from_jsonable, (ConfigurationError,)),
    "OutputCollection.from_jsonable": (OutputCollection.from_jsonable, (ConfigurationError,)),
    "DeferredHandle.from_dict": (DeferredHandle.from_dict, (ConfigurationError,)),
    "RetryPolicy(**kwargs)": (
        lambda d: RetryPolicy(**d) if isinstance(d, dict) else RetryPolicy(d),
        (ConfigurationError, TypeError),  # TypeError: an unknown or missing keyword
    ),
    # import_subtree documents ValueError (malformed), IntegrityError, KeyError (no parent).
    "pollard import_subtree": (_import_subtree, (ValueError, IntegrityError, KeyError)),
    "pollard HashRopeStore(data)": (_hashrope, (IntegrityError,)),
}


def run(scale: float) -> list[Outcome]:
    outcomes = []
    seeds = _seeds()
    for name, (load, documented) in LOADERS.items():
        outcome = Outcome(f"loader {name}", "only documented errors escape", cap=int(400 * scale))
        started = time.monotonic()
        rng = random.Random(name)
        escaped: dict[str, int] = {}
        deadline = Deadline(20 * scale, outcome.cap)
        while deadline.more():
            doc = _mutate(seeds[name], rng)
            outcome.trials += 1
            try:
                load(doc)
            except documented:
                continue
            except (PolluxError, PollardError) as exc:
                kind = type(exc).__name__
                if isinstance(exc, documented):
                    continue
                escaped[kind] = escaped.get(kind, 0) + 1
                if escaped[kind] == 1:
                    outcome.fail(f"undocumented {kind}: {str(exc)[:100]}")
                else:
                    outcome.failures += 1
            except Exception as exc:
                kind = type(exc).__name__
                escaped[kind] = escaped.get(kind, 0) + 1
                if escaped[kind] == 1:
                    outcome.fail(f"{kind} escaped: {str(exc)[:100]}")
                else:
                    outcome.failures += 1
        outcome.seconds = time.monotonic() - started
        kinds = ", ".join(f"{k} x{v}" for k, v in sorted(escaped.items()))
        outcome.figure = f"{outcome.trials} documents, escaped: {kinds or 'none'}"
        outcomes.append(outcome)
    return outcomes
