"""The command implementations behind ``pollux._cli.main`` (each a thin shell over the API)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pollux
from pollux import (
    Config,
    ConfigurationError,
    DeferredNotReadyError,
    Environment,
    PolluxError,
    SourceError,
)

from .errors import EXIT_FAILED, EXIT_OK, CLIError, report
from .fanout import fan_out
from .inputs import (
    REPLAY_KEY,
    build_config,
    check_new_handle,
    error_hint,
    load_schema,
    number_option,
    parse_sources,
    read_handle,
    read_job,
    read_prompts,
    read_stdin,
    regular_file,
    whole_number_option,
    write_handle,
)
from .options import LedgerOptions, collect_ledger_options, ledger_options
from .progress import job_progress
from .records import RecordSink, answered_indexes, jsonable, record_for

if TYPE_CHECKING:
    from .ledger import Ledger

__all__ = ["run_command"]


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _run(coroutine: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine; pollux errors become one line and a hint.

    Usage errors (configuration, sources) exit 2; provider failures exit 1.
    """
    try:
        return asyncio.run(coroutine)
    except (ConfigurationError, SourceError) as exc:
        raise error_hint(exc) from None
    except PolluxError as exc:
        raise CLIError(
            f"{type(exc).__name__}: {exc.message}", hint=exc.hint, code=EXIT_FAILED
        ) from None


def _prompt_text(text: str) -> str:
    prompt = read_stdin("the prompt") if text == "-" else text
    if not prompt.strip():
        raise CLIError("the prompt is empty", hint="pass the question as PROMPT")
    return prompt.strip() if text == "-" else prompt


# -- ask ----------------------------------------------------------------------------------------

# The library's hints name Output fields; a shell user gets what to do in the shell.
_FAILED_HINT = {
    "structured_output": "loosen the --schema, state the format in the prompt, or use a model "
    "with native structured output",
}


def _output_cap(args: argparse.Namespace) -> int | None:
    """``--max-output-tokens``: the answers' cap (sent as ``max_tokens``), or None."""
    value = getattr(args, "max_output_tokens", None)
    return None if value is None else whole_number_option(value, "--max-output-tokens")


def _open_ledger(
    options: LedgerOptions | None,
    config: Config,
    *,
    resume: bool = False,
    output_cap: int | None = None,
) -> Ledger | None:
    """The ledger of ``--ledger`` (pollard is imported only then)."""
    if options is None:
        return None
    try:
        from .ledger import Ledger
    except ImportError as exc:
        raise CLIError(
            f"--ledger needs pollard ({exc.name} is missing)", hint='pip install "pollux-ai[cli]"'
        ) from None
    return Ledger.open(options, config, resume=resume, output_cap=output_cap)


def _with_report(ledger: Ledger | None, command: Callable[[], int]) -> int:
    """Run ``command``; with a ledger, end with its cost report (after any error line).

    A ledger found damaged gets no cost line: its figures are what cannot be trusted; nor does a
    command refused as a second writer of its run label (it sent and charged nothing).
    """
    damaged = False
    try:
        code = command()
    except CLIError as exc:
        if ledger is None:
            raise
        damaged = not exc.cost_line
        code = report(exc)
    except Exception as exc:
        damage = None if ledger is None else ledger.store_error(exc)
        if damage is None:
            raise
        damaged = damage.damaged_ledger
        code = report(damage)
    finally:
        if ledger is not None:
            try:
                if not damaged:
                    _err(f"pollux: {ledger.report_line()}")
            except Exception as exc:  # a damaged ledger row: reported above, not a traceback
                if ledger.store_error(exc) is None:
                    raise
            finally:
                ledger.close()
    return code


def _ask(args: argparse.Namespace) -> int:
    prompt = _prompt_text(args.prompt)
    options = ledger_options(args, "pollux ask")
    config = build_config(args, replay=options is not None and options.replay)
    sources = parse_sources(args.source)
    schema = load_schema(args.schema)
    cap = _output_cap(args)
    # Hybrid, as many: the ledger decides what was answered, so an identical ask under the same
    # label is served from it (avoided) rather than asked and charged again.
    ledger = _open_ledger(options, config, resume=True, output_cap=cap)
    settings: dict[str, Any] = {} if cap is None else {"max_tokens": cap}

    async def ask() -> int:
        if ledger is None:
            answer = await pollux.run(
                prompt,
                sources=sources,
                instructions=args.instructions,
                output=schema,
                config=config,
                **settings,
            )
        else:
            environment = Environment(instructions=args.instructions, sources=tuple(sources))
            answer = await ledger.ask(
                prompt, environment=environment, output=schema, settings=settings
            )
        if args.json:
            _out(json.dumps(answer.to_jsonable(), indent=2, ensure_ascii=False))
        elif answer.failed:
            pass  # the error below says what went wrong; the text is not the answer asked for
        elif answer.structured is not None:
            _out(json.dumps(jsonable(answer.structured), indent=2, ensure_ascii=False))
        else:
            _out(answer.text)
        if answer.failed:  # a schema-invalid or non-JSON answer, as 'many' fails its record
            error = answer.diagnostics.error or {}
            raise CLIError(
                f"{error.get('type', 'error')}: {error.get('message', 'the call failed')}",
                hint=_FAILED_HINT.get(str(error.get("type")), "see the error above")
                + ("" if args.json else "; --json prints the whole Output, the model's text too"),
                code=EXIT_FAILED,
            )
        return EXIT_OK

    return _with_report(ledger, lambda: _run(ask()))


# -- many ---------------------------------------------------------------------------------------


def _many(args: argparse.Namespace) -> int:
    prompts = read_prompts(args.prompts_file)
    concurrency = whole_number_option(args.concurrency, "--concurrency")
    name = "stdin" if args.prompts_file == "-" else Path(args.prompts_file).name
    options = ledger_options(args, f"pollux many {name}")
    config = build_config(
        args, concurrency=concurrency, replay=options is not None and options.replay
    )
    sources = parse_sources(args.source)
    schema = load_schema(args.schema)
    out = Path(args.out) if args.out else None
    if out is not None:
        regular_file(args.out, "--out", missing_ok=True)  # a FIFO would block the command
    done = set() if out is None else answered_indexes(out, prompts)
    todo = [index for index in range(len(prompts)) if index not in done]
    if not todo:
        _err(f"pollux: all {len(prompts)} prompts are already answered in {out}")
        return EXIT_OK
    sink = RecordSink(out)
    try:
        ledger = _open_ledger(options, config, resume=True, output_cap=_output_cap(args))
    except CLIError:
        sink.close()
        raise
    fan = fan_out(
        prompts,
        todo,
        sources=sources,
        instructions=args.instructions,
        schema=schema,
        config=config,
        ledger=ledger,
        sink=sink,
        skipped=len(done),
        settings={} if (cap := _output_cap(args)) is None else {"max_tokens": cap},
    )
    try:
        return _with_report(ledger, lambda: _run(fan))
    finally:
        sink.close()


# -- deferred -----------------------------------------------------------------------------------


def _defer(args: argparse.Namespace) -> int:
    options = ledger_options(args, "pollux defer")
    if args.mock:
        raise CLIError(
            "--mock cannot defer across commands: mock jobs live only in the process that "
            "submitted them",
            hint="for an offline job, run the emulator (python -m pollux.testing) and set "
            "OPENAI_BASE_URL to its /openai/v1 URL and OPENAI_API_KEY to any value",
        )
    prompts = read_prompts(args.prompts_file)
    target = check_new_handle(args.handle)
    config = build_config(args, replay=options is not None and options.replay)
    sources = parse_sources(args.source)
    schema = load_schema(args.schema)
    max_out = (
        None
        if args.max_output_tokens is None
        else whole_number_option(args.max_output_tokens, "--max-output-tokens")
    )

    def submitted(handle: dict[str, Any], extra: str = "") -> None:
        _out(
            f"submitted job {handle['job_id']}: {handle['request_count']} requests to "
            f"{handle['provider']} {handle['model']}; handle saved to {target}{extra}"
        )

    if options is None:

        async def submit() -> int:
            handle = await pollux.defer(
                prompts,
                sources=sources,
                instructions=args.instructions,
                output=schema,
                max_tokens=max_out,
                config=config,
            )
            write_handle(target, handle)
            submitted(handle.to_dict())
            return EXIT_OK

        return _run(submit())
    if max_out is None:  # before the ledger is opened: a usage error leaves no file behind
        raise CLIError(
            "defer --ledger needs --max-output-tokens: it bounds the worst case the budget "
            "reserves at submit",
            hint="pass --max-output-tokens N (the most tokens one answer may use)",
        )
    ledger = _open_ledger(options, config)
    assert ledger is not None

    async def governed() -> int:
        job = await ledger.defer(
            prompts,
            sources=sources,
            instructions=args.instructions,
            output=schema,
            max_tokens=max_out,
        )
        write_handle(target, job)
        submitted(job["handle"], f"; its worst case is reserved in {options.display}")
        return EXIT_OK

    return _with_report(ledger, lambda: _run(governed()))


def _snapshot_json(snapshot: pollux.DeferredSnapshot) -> dict[str, Any]:
    fields = (
        "job_id",
        "provider",
        "model",
        "status",
        "provider_status",
        "request_count",
        "succeeded",
        "failed",
        "pending",
        "submitted_at",
        "completed_at",
        "expires_at",
    )
    return {name: getattr(snapshot, name) for name in fields} | {
        "is_terminal": snapshot.is_terminal
    }


def _status(args: argparse.Namespace) -> int:
    handle = read_handle(args.handle)

    async def status() -> int:
        snapshot = await pollux.inspect_deferred(handle)
        if args.json:
            _out(json.dumps(_snapshot_json(snapshot), indent=2))
        else:
            _out(
                f"job {snapshot.job_id} ({snapshot.provider} {snapshot.model}): "
                f"status={snapshot.status} succeeded={snapshot.succeeded} "
                f"failed={snapshot.failed} pending={snapshot.pending} "
                f"of {snapshot.request_count}" + (" (terminal)" if snapshot.is_terminal else "")
            )
        return EXIT_OK

    return _run(status())


def _collect(args: argparse.Namespace) -> int:
    poll = number_option(args.poll_seconds, "--poll-seconds")
    timeout = None if args.timeout is None else number_option(args.timeout, "--timeout")
    if timeout is not None and not args.wait:
        raise CLIError("--timeout needs --wait", hint="pass --wait --timeout N, or drop --timeout")
    handle = read_handle(args.handle)
    ledger: Ledger | None = None
    job: dict[str, Any] = {}
    if args.ledger is not None:
        job = read_job(args.handle)
        if "governed_job" not in job:
            raise CLIError(
                f"{args.handle} was not submitted with --ledger: there is nothing to settle",
                hint="collect it without --ledger, or submit with 'pollux defer --ledger'",
            )
        options = collect_ledger_options(args, str(job.get("run") or "pollux defer"))
        provider, model = handle.provider, handle.model
        try:
            config = Config(provider=provider, model=model)  # type: ignore[arg-type]
        except ConfigurationError as exc:  # no key for the handle's provider in this process
            if not args.replay:
                raise error_hint(exc) from None
            # Replay serves the ledger and sends nothing, so it needs no key (as ask --replay).
            config = Config(provider=provider, model=model, api_key=REPLAY_KEY)  # type: ignore[arg-type]
        ledger = _open_ledger(options, config)
    elif args.replay:
        collect_ledger_options(args, "")  # raises: --replay needs --ledger
    schema = load_schema(args.schema)
    out = Path(args.out) if args.out else None
    if out is not None:
        regular_file(args.out, "--out", missing_ok=True)  # a FIFO would block the command

    async def collect() -> int:
        if args.wait and not (ledger is not None and ledger.options.replay):
            progress = job_progress()
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            try:
                while True:
                    snapshot = await pollux.inspect_deferred(handle)
                    progress.update(snapshot)
                    if snapshot.is_terminal:
                        break
                    if deadline is not None and loop.time() >= deadline:
                        raise CLIError(
                            f"job {handle.job_id} is not finished after --timeout {args.timeout} "
                            f"s (status={snapshot.status}, {snapshot.pending} pending)",
                            hint=f"it keeps running: collect it later (pollux collect "
                            f"{args.handle} --wait), or check it with pollux status {args.handle}",
                            code=EXIT_FAILED,
                        )
                    pause = poll if deadline is None else min(poll, deadline - loop.time())
                    await asyncio.sleep(max(pause, 0))
            finally:
                progress.close()
        try:
            if ledger is None:
                results = await pollux.collect_deferred(handle, response_schema=schema)
            else:
                results = await ledger.collect(job, output=schema)
        except DeferredNotReadyError as exc:
            raise CLIError(
                f"job {handle.job_id} is not finished: {exc.message}",
                hint="wait until it is: pollux collect --wait, or pollux status first",
                code=EXIT_FAILED,
            ) from None
        indexes = results.prompt_indexes or tuple(range(len(results.outputs)))
        sink = RecordSink(out, append=False)
        try:
            for index, output in zip(indexes, results.outputs, strict=True):
                sink.write(record_for(index, output))
        finally:
            sink.close()
        failed = sink.counts["failed"]
        _err(
            f"pollux: job {handle.job_id}: {sink.counts['ok']} answered, {failed} failed, "
            f"{sink.tokens:,} tokens" + (f"; records in {out}" if out else "")
        )
        return EXIT_FAILED if failed or not results.outputs else EXIT_OK

    if ledger is None:
        return _run(collect())
    return _with_report(ledger, lambda: _run(collect()))


def _cancel(args: argparse.Namespace) -> int:
    handle = read_handle(args.handle)

    async def cancel() -> int:
        await pollux.cancel_deferred(handle)
        _out(
            f"cancellation requested for job {handle.job_id}; the final status is the "
            f"provider's: pollux status {args.handle}"
        )
        return EXIT_OK

    return _run(cancel())


# -- check --------------------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    config = build_config(args)

    async def check() -> int:
        readiness = await pollux.check_ready(config)
        if args.json:
            _out(
                json.dumps(
                    {
                        "ready": readiness.ready,
                        "provider": readiness.provider,
                        "model": readiness.model,
                        "model_verified": readiness.model_verified,
                        "status_code": readiness.status_code,
                        "message": readiness.message,
                    },
                    indent=2,
                )
            )
        elif readiness.ready:
            _out(f"ready: {readiness.provider} {readiness.model or ''}: {readiness.message}")
        else:
            _err(f"pollux: {readiness.provider} is not ready: {readiness.message}")
        return EXIT_OK if readiness.ready else EXIT_FAILED

    return _run(check())


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "ask": _ask,
    "many": _many,
    "defer": _defer,
    "status": _status,
    "collect": _collect,
    "cancel": _cancel,
    "check": _check,
}


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command and return its exit code.

    Raises:
        CLIError: A usage or input error (or an outcome reported as one line).
    """
    return _COMMANDS[args.command](args)
