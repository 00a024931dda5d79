"""``--ledger``: every call as a governed pollard step, through the bridge.

This is the one module of pollux that imports pollard (``pollux-ai[cli]`` installs it): the command
line is an application on top of both libraries, and ``import pollux`` never loads it. It uses
only pollard's public API and the bridge, ``pollard.adapters.pollux``.

Each prompt is its own ``model_call`` step directly under the run's root, through its own run
object (so concurrent steps never share a cursor) and with ``attempt`` = how many identical
prompts come before it in the file. A prompt's node therefore depends only on the request, not
on which prompts ran before it, so a resumed run and ``--replay`` find the same nodes, and
``pollard show/report STORE LABEL`` see one flat fan-out.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pollard import (
    AsyncRun,
    AsyncRuntime,
    Budget,
    BudgetExceeded,
    IntegrityError,
    MissingRecording,
    PollardError,
    WriterConflict,
)
from pollard.adapters.pollux import (
    PolluxTokenEstimator,
    SharedQuota,
    governed_collect,
    governed_defer,
    governed_run,
)
from pollard.meters import CostMeter, StepMeter, TokenMeter
from pollard.stores import parse_store_spec
from pollux import Config, Environment, Output, OutputCollection, PolluxError, Source
from pollux._pricing import PRICE_PROVIDERS

from .errors import EXIT_FAILED, CLIError, shell_hint
from .options import LedgerOptions
from .records import Record, record_for

__all__ = ["Ledger", "shared_quota"]

# An Azure deployment is priced before the call by the model it is said to serve.
_PRICING_HINT = (
    "set POLLUX_AZURE_PRICING_MODEL to the model the deployment serves (e.g. gpt-5-mini)"
)


def _error(exc: BaseException) -> dict[str, Any]:
    detail: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    hint = getattr(exc, "hint", None)
    if hint:
        detail["hint"] = shell_hint(hint)
    return detail


# The flag that sets each meter's limit, for a refusal's hint.
_BUDGET_FLAGS = {"steps": "--max-calls", "tokens": "--max-tokens", "usd": "--max-usd"}


@dataclass
class Ledger:
    """An open pollard runtime and the charges of this command's steps."""

    options: LedgerOptions
    config: Config
    runtime: AsyncRuntime
    budget: Budget | None
    priced: bool
    # The label's run, opened on its root by the first call. Every step is a child of the root,
    # through a fork of it (its own cursor, no store I/O, charges counted into this run), so
    # concurrent steps never share a cursor and one report counts them all.
    _runs: list[AsyncRun] = field(default_factory=list)

    @classmethod
    def open(
        cls,
        options: LedgerOptions,
        config: Config,
        *,
        resume: bool = False,
        output_cap: int | None = None,
    ) -> Ledger:
        """Open the store with the meters the budget needs.

        With ``resume`` (``pollux ask`` and ``many``) the runtime is pollard's hybrid mode: the
        ledger, not ``--out``, decides what was answered, so a prompt answered by an earlier
        (interrupted, killed) command is served from it, and one cancelled in flight reuses its
        charge.

        With ``output_cap`` (``--max-output-tokens``, sent as every call's ``max_tokens``) the
        token and dollar budgets are hard: each call holds its input estimate plus the cap
        (priced at the model's rates for ``--max-usd``) before it is sent and settles to its
        usage, so concurrent calls cannot overshoot them. Without it they are estimated: the
        token budget checks the input estimate first, and both charge what was used after.

        Raises:
            CLIError: The store cannot be opened, or ``--max-usd`` for a model without a price.
        """
        if options.replay and "://" not in options.store and not Path(options.store).exists():
            raise CLIError(
                f"--replay: ledger {options.store} does not exist",
                hint="record first: run the same command with --ledger and without --replay",
            )
        meters: list[Any] = [
            StepMeter(),
            # Without --max-output-tokens no call states an output cap, so the token budget
            # stays estimated (a hard meter would refuse every prompt as unbounded).
            TokenMeter(PolluxTokenEstimator(), estimated=output_cap is None),
        ]
        usd = _cost_meter(config, hard=output_cap is not None)
        if usd is not None:
            meters.append(usd)
        elif options.max_usd is not None:
            if not _prices_installed():  # the package is missing, not the model's price
                raise CLIError(
                    "--max-usd needs the price package genai-prices, which is not installed",
                    hint='pip install "pollard[prices]" (or "pollux-ai[cli]"), or use '
                    "--max-tokens / --max-calls",
                )
            if config.provider == "azure_openai":
                raise CLIError(
                    f"--max-usd: no price is known for deployment {config.model!r} before "
                    "the call (Azure names the model it serves only in the answer)",
                    hint=f"{_PRICING_HINT}, or use --max-tokens or --max-calls",
                )
            raise CLIError(
                f"--max-usd: no price is known for model {config.model!r}",
                hint="use --max-tokens or --max-calls for this model",
            )
        budget = None
        if any(v is not None for v in (options.max_usd, options.max_tokens, options.max_calls)):
            budget = Budget(usd=options.max_usd, tokens=options.max_tokens, steps=options.max_calls)
        try:
            runtime = AsyncRuntime(
                options.store,
                meters=meters,
                mode="replay" if options.replay else "hybrid" if resume else "record",
            )
        except ImportError as exc:
            raise CLIError(
                f"--ledger {options.display}: {exc.name or 'a driver'} is missing",
                hint='pip install "pollard[pg]" for PostgreSQL ledgers',
            ) from None
        except PollardError as exc:
            # pollard's own words name what is missing (no pollard tables, an unknown store id
            # with the close ones); the DSN, which they may quote, is replaced by its display.
            dsn = options.store.rpartition("#")[0] or options.store
            raise CLIError(
                f"--ledger {options.display}: {str(exc).replace(dsn, options.display)}",
                hint=(exc.hint or "pass a SQLite file or postgresql://...#store_id").replace(
                    dsn, options.display
                ),
            ) from None
        except (ValueError, OSError) as exc:
            dsn = options.store.rpartition("#")[0] or options.store
            reason = _without_dsn(str(exc), dsn, options.display) or type(exc).__name__
            raise CLIError(
                f"--ledger {options.display}: cannot open the store: {reason}",
                hint="pass a SQLite file or postgresql://...#store_id",
            ) from None
        except Exception as exc:  # a database driver's connection error
            raise CLIError(
                f"--ledger {options.display}: cannot connect ({type(exc).__name__})",
                hint="check that the database is reachable and the DSN is right",
            ) from None
        return cls(options, config, runtime, budget, usd is not None)

    def close(self) -> None:
        """Close the store."""
        self.runtime.close()

    def store_error(self, exc: BaseException) -> CLIError | None:
        """Pollard's own error (a damaged ledger row, a lost store) as one line, else None."""
        if not isinstance(exc, PollardError):
            return None
        dsn = self.options.store.rpartition("#")[0] or self.options.store
        return CLIError(
            f"--ledger {self.options.display}: {_without_dsn(str(exc), dsn, self.options.display)}",
            hint=_without_dsn(exc.hint or "run 'pollard verify' on the store", dsn, "the store"),
            damaged_ledger=isinstance(exc, IntegrityError),
        )

    def _take(self) -> AsyncRun:
        if self._runs:
            return self._runs[0].fork()
        try:
            run = self.runtime.run(self.options.label, budget=self.budget)
        except PollardError as exc:
            raise CLIError(
                f"--ledger {self.options.display}: run {self.options.label!r}: {exc}",
                hint="in --replay, use the --label the calls were recorded under",
            ) from None
        self._runs.append(run)
        return run.fork()

    def _budget_hint(self, exc: BudgetExceeded, *also: str) -> str:
        """A refusal's hint in the shell's terms: the flag of the meter that refused.

        pollard's own hint speaks of ``Budget`` and ``run.report()``; a hint that is not that
        default (an unbounded call's, which names ``--max-output-tokens`` through
        `shell_hint`) is kept.
        """
        if exc.hint != BudgetExceeded.default_hint:
            return exc.hint or ""
        flag = _BUDGET_FLAGS.get(exc.meter or "", "the --max-* limit")
        ways = [
            f"raise {flag} (the run's earlier calls count against it)",
            "pass another --label for a fresh budget",
            *also,
        ]
        last = " or " if len(ways) == 2 else ", or "
        listed = ", ".join(ways[:-1]) + last + ways[-1]
        return f"{listed}; {self._report_command()} shows what was spent"

    def _report_command(self) -> str:
        """The shell command that prints this run's report (quoted as a shell needs it)."""
        return (
            f"pollard report {shlex.quote(self.options.display)} {shlex.quote(self.options.label)}"
        )

    def _hidden(self, text: str) -> str:
        """``text`` with the store's DSN (which may hold a password) replaced by its display."""
        dsn = self.options.store.rpartition("#")[0] or self.options.store
        return text.replace(dsn, self.options.display)

    def _second_writer(self, exc: WriterConflict) -> CLIError:
        """Another live process writes this run label: one line, and what to do."""
        if exc.alive and exc.pid is not None:
            hint = (
                f"wait for the other command to finish (process {exc.pid} on this host is "
                "still running it) and run this one again, or pass another --label; one that "
                "was killed on this host is taken over at once"
            )
        elif exc.host is not None and exc.pid is not None:
            hint = (
                f"wait for the other command to finish (process {exc.pid} on host "
                f"{exc.host!r}, which this host cannot check) and run this one again, or pass "
                "another --label; one that was killed there, or lost its ledger, holds the "
                "label until about a minute after it stopped"
            )
        else:
            hint = (
                "wait for the other command to finish and run this one again (one that was "
                "killed elsewhere, or lost its ledger, holds the label until about a minute "
                "after it stopped), or pass another --label"
            )
        return CLIError(
            f"--ledger {self.options.display}: run {self.options.label!r} is being written by "
            "another process (one writer per run label), so this command sends nothing",
            hint=hint,
            cost_line=False,
        )

    def _integrity(self, exc: IntegrityError) -> CLIError:
        """A ledger changed outside pollard: one line and the command that lists the damage."""
        return CLIError(
            f"ledger integrity error: {self._hidden(str(exc))}",
            hint=f"run 'pollard verify {self.options.display}' to see every finding; the "
            "ledger was changed outside pollard, so nothing is served from it",
            damaged_ledger=True,
        )

    def _store_failed(self, exc: PollardError) -> CLIError:
        """The store failed (a lost connection, a full disk): one line, exit 1."""
        return CLIError(
            f"ledger {self.options.display}: {self._hidden(str(exc))}",
            hint=self._hidden(
                exc.hint
                or "check that the ledger is reachable, then run the "
                "same command again: what the ledger recorded is not asked again"
            ),
            code=EXIT_FAILED,
        )

    def _charges(self) -> tuple[dict[str, Decimal], dict[str, Decimal], dict[str, str]]:
        """Spent and avoided by this command's steps, and the label's ledger totals."""
        spent: dict[str, Decimal] = {}
        avoided: dict[str, Decimal] = {}
        total: dict[str, str] = {}
        for run in self._runs:
            report = run.report(exact=True)
            for name, value in report["spent"].items():
                spent[name] = spent.get(name, Decimal(0)) + Decimal(value)
            for name, value in report["avoided"].items():
                avoided[name] = avoided.get(name, Decimal(0)) + Decimal(value)
            total = report["total"]
        return spent, avoided, total

    async def ask(
        self,
        prompt: str,
        *,
        environment: Environment,
        output: Any,
        settings: dict[str, Any] | None = None,
    ) -> Output:
        """One governed ``pollux.run``; pollux errors propagate.

        Raises:
            CLIError: A budget refused the call (exit 1), or ``--replay`` has no recording of it.
        """
        run = self._take()
        try:
            return await governed_run(
                run,
                prompt,
                environment=environment,
                config=self.config,
                output=output,
                **(settings or {}),
            )
        except BudgetExceeded as exc:
            raise CLIError(
                f"refused by the budget before any provider call: {exc}",
                hint=self._budget_hint(exc),
                code=EXIT_FAILED,
            ) from None
        except MissingRecording as exc:
            raise CLIError(
                f"not in the ledger: {exc}",
                hint="record it first: run the same command without --replay",
                code=EXIT_FAILED,
            ) from None
        except IntegrityError as exc:
            raise self._integrity(exc) from None
        except WriterConflict as exc:
            raise self._second_writer(exc) from None
        except PollardError as exc:
            raise self._store_failed(exc) from None

    async def one(
        self,
        index: int,
        prompt: str,
        attempt: int,
        *,
        environment: Environment,
        output: Any,
        settings: dict[str, Any] | None = None,
    ) -> Record:
        """One prompt of a fan-out as a governed step, its outcome as a record (never raises)."""
        run = self._take()
        try:
            answer = await governed_run(
                run,
                prompt,
                environment=environment,
                config=self.config,
                output=output,
                attempt=attempt,
                **(settings or {}),
            )
        except BudgetExceeded as exc:
            error = _error(exc) | {"hint": self._budget_hint(exc), "refusal_id": exc.refusal_id}
            if exc.meter is not None:
                error["meter"] = exc.meter
            record = Record(index, "refused", prompt=prompt, error=error, node=exc.refusal_id)
        except MissingRecording as exc:
            error = _error(exc) | {"hint": "record it first: run without --replay"}
            record = Record(index, "missing", prompt=prompt, error=error)
        except IntegrityError as exc:  # every later prompt would meet it: stop the command
            raise self._integrity(exc) from None
        except WriterConflict as exc:  # another process writes this run: send nothing more
            raise self._second_writer(exc) from None
        except PollardError as exc:
            # The store failed for this prompt (a lost connection): it is reported as failed,
            # and the others go on; a resume asks again only what the ledger has not recorded.
            error = _error(exc)
            error["message"] = self._hidden(error["message"])
            if "hint" in error:
                error["hint"] = self._hidden(error["hint"])
            record = Record(index, "failed", prompt=prompt, error=error)
        except PolluxError as exc:
            record = Record(index, "failed", prompt=prompt, error=_error(exc))
        else:
            record = record_for(index, answer, prompt=prompt)
            record.node = run.cursor_id
        return record

    async def defer(
        self,
        prompts: list[str],
        *,
        sources: list[Source],
        instructions: str | None,
        output: Any,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        """One governed ``pollux.defer``; the governed job as JSON data for the handle file.

        Raises:
            CLIError: The budget refused the job's worst case (exit 1, nothing was sent), no
                ``--max-output-tokens``, or an unpriced model under ``--max-usd`` (exit 2).
        """
        if max_tokens is None:
            raise CLIError(
                "defer --ledger needs --max-output-tokens: it bounds the worst case the "
                "budget reserves at submit",
                hint="pass --max-output-tokens N (the most tokens one answer may use)",
            )
        run = self._take()
        try:
            job = await governed_defer(
                run,
                prompts,
                sources=sources,
                instructions=instructions,
                output=output,
                config=self.config,
                max_tokens=max_tokens,
            )
        except BudgetExceeded as exc:
            raise CLIError(
                f"refused by the budget before anything was sent: {exc}",
                hint=self._budget_hint(exc, "lower --max-output-tokens", "submit fewer prompts"),
                code=EXIT_FAILED,
            ) from None
        except MissingRecording as exc:
            raise CLIError(
                f"not in the ledger: {exc}",
                hint="record it first: run the same command without --replay",
                code=EXIT_FAILED,
            ) from None
        except PollardError as exc:
            raise CLIError(str(exc), hint=exc.hint or "see 'pollux defer --help'") from None
        return job.to_dict()

    async def collect(self, job: dict[str, Any], *, output: Any) -> OutputCollection:
        """Collect and settle a governed job (served from the ledger once settled).

        Raises:
            CLIError: The job is not in this ledger (exit 2), or ``--replay`` and it was never
                collected there (exit 1).
        """
        run = self._take()
        try:
            return await governed_collect(run, job, output=output)
        except MissingRecording as exc:
            raise CLIError(
                f"not in the ledger: {exc}",
                hint="collect it once without --replay first",
                code=EXIT_FAILED,
            ) from None
        except PollardError as exc:
            raise CLIError(
                str(exc), hint=exc.hint or "pass the ledger the job was submitted to"
            ) from None

    def report_line(self) -> str:
        """The one-line cost report of this command."""

        def amounts(values: dict[str, Any]) -> str:
            # report() lists every meter, zeros too; the line names only what was charged
            shown = [
                f"{name}={Decimal(value).normalize():f}"
                for name, value in sorted(values.items())
                if Decimal(value)
            ]
            return " ".join(shown) if shown else "nothing"

        try:
            spent, avoided, total = self._charges()
        except PollardError as exc:  # the store is unreachable: say so, never raise again here
            return (
                f"ledger {self.options.display} run {self.options.label!r}: the cost report "
                f"could not be read ({type(exc).__name__}: {self._hidden(str(exc))}); "
                f"{self._report_command()} shows it once the ledger is reachable"
            )
        price = "" if self.priced else f" (no usd price for {self.config.model})"
        if not self.priced and self.config.provider == "azure_openai":
            price = f" (no usd price for deployment {self.config.model}: {_PRICING_HINT})"
        mock = (
            " (mock prices the mock's estimated tokens)"
            if self.config.use_mock and self.priced
            else ""
        )
        return (
            f"ledger {self.options.display} run {self.options.label!r}: spent {amounts(spent)}; "
            f"avoided {amounts(avoided)}; run total {amounts(total)}{price}{mock}"
        )


def _prices_installed() -> bool:
    try:  # only on the error path: which of the two things is missing decides the message
        import genai_prices  # noqa: F401
    except ImportError:
        return False
    return True


def _without_dsn(text: str, dsn: str, display: str) -> str:
    """``text`` with the DSN (and its password, which a driver may quote alone) replaced."""
    text = text.replace(dsn, display)
    if "://" in dsn:
        try:
            password = urlsplit(dsn).password
        except ValueError:
            password = None
        if password:
            text = text.replace(password, "***")
    return " ".join(text.split())


def _cost_meter(config: Config, *, hard: bool) -> Any:
    """genai-prices' dollar meter when it knows the model, else None (never a failing meter).

    ``hard`` (every call states an output cap): each call holds its priced worst case until it
    settles, so ``--max-usd`` is a hard cap; else the meter is the estimated (soft) one.
    A local server has no price list, so its calls are not priced (which also spares the
    command loading genai-prices' tables).
    """
    if config.provider == "local":
        return None
    try:
        meter = CostMeter.from_genai_prices(
            provider_id=PRICE_PROVIDERS.get(config.provider),
            estimator=PolluxTokenEstimator(),
            estimated=not hard,
        )
        payload: dict[str, Any] = {"provider": config.provider, "model": config.model}
        if config.pricing_model is not None:
            payload["_pollard"] = {"pricing_model": config.pricing_model}
        meter.precheck_estimate("model_call", payload)
    except (ImportError, ValueError):
        return None
    return meter


def keyword_dsn_label(text: str) -> str | None:
    """``postgresql#store_id`` when pollard reads ``text`` as a libpq keyword DSN, else None."""
    try:
        spec = parse_store_spec(text)
    except ValueError:
        return None
    return spec.label if spec.kind == "postgres" else None


def shared_quota(target: str, **options: Any) -> SharedQuota:
    """The ``--quota-store`` quota: a pollard `SharedQuota` (this module is the CLI's pollard door).

    Args:
        target: The store (a SQLite path, a ``postgresql://`` DSN or a ``redis://`` URL).
        **options: `SharedQuota` keyword arguments.
    """
    return SharedQuota(target, **options)
