"""The public :class:`Emulator`: a loopback server speaking provider wire formats."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from ._clock import DEFAULT_START, VirtualClock
from ._core import ApiError, Call, Core, Route, Settings, WireSpec
from ._http import HTTPRequest, Outcome, json_response
from ._log import RecordedRequest, selector_matches
from ._model import PrefixCache
from ._quota import EmulatorQuota, QuotaMeter
from ._script import Handler, Scripted
from ._server import ServerThread
from .wires import load_wires

_BATCH_STAGES = ("validating", "in_progress", "finalizing", "cancelling")


class EmulatorError(Exception):
    """Misuse of the emulator, or a failure inside it.

    Attributes:
        hint: How to fix it.
    """

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(f"{message} (hint: {hint})")
        self.hint = hint


class Emulator:
    """A loopback HTTP server that speaks provider wire formats, for tests.

    Point an official SDK at :meth:`base_url` and it works as against the real API: the same
    HTTP, server-sent events and error paths. Answers come from a deterministic default model or
    from scripted :class:`Reply` objects; :class:`Fault` objects inject errors; batch jobs and
    expiries run on a virtual clock moved by :meth:`advance`.

    Args:
        api_key: When set, requests must carry this key, or get the provider's 401.
        latency: Seconds added before every answer.
        stream_delay: Seconds between streamed events.
        models: When set, the model catalog; other model names get the provider's not-found error.
            Empty or None: every model name is served. A mapping names, for each entry, the
            model its responses report (``{"prod-gpt5-mini": "gpt-5-mini-2025-08-07"}``: an
            Azure deployment and the model behind it, or an alias and its snapshot; the
            Responses API's ``model`` field). A name listed without one reports itself.
        record: Keep a log of requests in :attr:`requests`.
        start_time: The virtual clock's start (seconds since the epoch).
        cache_min_tokens: The shortest prompt prefix cached, for every model; ``None`` (the
            default) applies each model's own minimum as its provider documents it (Anthropic
            4096 for Opus 4.5+ and Haiku 4.5, 2048 for Claude 3 Haiku, else 1024; Gemini 4096
            for Pro models, else 1024; OpenAI 1024).
        cache_block_tokens: Cache hits grow in steps of this many tokens.
        cache_ttl: Seconds (virtual) a cached prefix lives after its last use.
        batch_durations: Virtual seconds a batch spends ``validating``, ``in_progress``,
            ``finalizing`` and ``cancelling`` (defaults 1, 10, 1, 1). A job that would not finish
            within its 24 hour completion window expires.
        process: Run the server in a child process (for benchmarks). Scripting and the request
            log are then unavailable; :meth:`advance` still works.
        port: The port to bind (0 picks a free one).
        quotas: Rate limits by wire name (``{"openai": EmulatorQuota(requests=60)}``): a
            generate request over one is answered with that provider's 429 and rate-limit
            headers (see :class:`EmulatorQuota`); :meth:`set_quota` changes them while running.

    Example:
        >>> with Emulator() as emu:
        ...     emu.base_url("openai").startswith("http://127.0.0.1:")
        True
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        latency: float = 0.0,
        stream_delay: float = 0.0,
        models: tuple[str, ...] | list[str] | Mapping[str, str] | None = (),
        record: bool = True,
        start_time: float = DEFAULT_START,
        cache_min_tokens: int | None = None,
        cache_block_tokens: int = 128,
        cache_ttl: float = 300.0,
        batch_durations: Mapping[str, float] | None = None,
        process: bool = False,
        port: int = 0,
        quotas: Mapping[str, EmulatorQuota] | None = None,
    ) -> None:
        if latency < 0 or stream_delay < 0:
            raise ValueError("latency and stream_delay must be >= 0 seconds")
        if isinstance(models, str):
            raise ValueError(f"models must be a list of model names, got the string {models!r}")
        served: dict[str, str] = {}
        if isinstance(models, Mapping):
            for name, model in models.items():
                if not isinstance(name, str) or not isinstance(model, str) or not model:
                    raise ValueError(
                        f"models maps each name to the model it serves (strings), got "
                        f"{name!r}: {model!r}"
                    )
            served = dict(models)
        models = tuple(models or ())
        durations = {"validating": 1.0, "in_progress": 10.0, "finalizing": 1.0, "cancelling": 1.0}
        for key, value in (batch_durations or {}).items():
            if key not in durations:
                raise ValueError(
                    f"unknown batch stage {key!r}; the stages are {', '.join(_BATCH_STAGES)}"
                )
            if value < 0:
                raise ValueError(f"batch stage {key!r} must last >= 0 seconds, got {value!r}")
            durations[key] = float(value)
        self._settings = Settings(
            latency=latency,
            stream_delay=stream_delay,
            api_key=api_key,
            models=tuple(models),
            served=served,
            record=record,
            batch_durations=durations,
        )
        # What a child process needs to build the same emulator (process=True).
        self._options: dict[str, Any] = {
            "api_key": api_key,
            "latency": latency,
            "stream_delay": stream_delay,
            "models": served or list(models),
            "start_time": start_time,
            "cache_min_tokens": cache_min_tokens,
            "cache_block_tokens": cache_block_tokens,
            "cache_ttl": cache_ttl,
            "batch_durations": durations,
        }
        self._clock = VirtualClock(start_time)
        self._cache = PrefixCache(self._clock, cache_min_tokens, cache_block_tokens, cache_ttl)
        wires = [*load_wires(), _control_wire()]
        self._mounts = {w.name: w.base_path for w in wires if not w.name.startswith("_")}
        self._core = Core(wires, self._clock, self._settings, self._cache)
        self._process = process
        self._port = port
        self._thread: ServerThread | None = None
        self._child: subprocess.Popen[str] | None = None
        self._origin = ""
        self._options["quotas"] = {}
        for wire_name, quota in (quotas or {}).items():
            self.set_quota(wire_name, quota)

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Emulator:
        """Start serving (the context managers call this); returns ``self``."""
        if self._origin:
            return self
        if self._process:
            self._start_process()
        else:
            core = self._core

            def app_factory() -> Callable[[HTTPRequest], Any]:
                async def app(request: HTTPRequest) -> Outcome:
                    return await core.handle(request)

                return app

            self._thread = ServerThread(app_factory, port=self._port)
            self._thread.start()
            self._origin = f"http://127.0.0.1:{self._thread.port}"
        return self

    def _start_process(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "pollux.testing",
            "--port",
            str(self._port),
            "--options",
            json.dumps(self._options),
            # The virtual clock moves only when the test says so, as in-process: the standalone
            # command's default lets it follow real time (so its batches complete by themselves).
            "--clock-rate",
            "0",
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self._child = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        assert self._child.stdout is not None
        line = self._child.stdout.readline()
        if not line.startswith("listening on "):
            self._stop_process()
            raise EmulatorError(
                "the emulator process did not start",
                hint="run `python -m pollux.testing` by hand to see its error",
            )
        self._origin = line.split()[-1]

    def _stop_process(self) -> None:
        child = self._child
        self._child = None
        if child is None:
            return
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()

    def close(self) -> None:
        """Stop serving and release the port; idempotent.

        Raises:
            EmulatorError: A handler or the emulator itself failed while serving (the failures
                are in :attr:`errors`); raised once, after shutting down.
        """
        if self._thread is not None:
            thread, self._thread = self._thread, None
            try:
                thread.stop()
            except TimeoutError as exc:
                raise EmulatorError(
                    str(exc), hint="a handler installed with Emulator.on must return promptly"
                ) from exc
        self._stop_process()
        self._origin = ""
        if self._core.errors:
            count = len(self._core.errors)
            last = self._core.errors[-1].strip().splitlines()[-1]
            self._core.errors.clear()
            raise EmulatorError(
                f"{count} request(s) failed inside the emulator; last: {last}",
                hint="a handler installed with Emulator.on raised, or the emulator has a bug; "
                "read Emulator.errors before closing to see the tracebacks",
            )

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        with contextlib.suppress(EmulatorError):  # the exception in flight matters more
            self.close()

    async def __aenter__(self) -> Emulator:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.__exit__, exc_type, exc, tb)

    # --- addresses ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server origin, ``http://127.0.0.1:<port>``."""
        self._require_running()
        return self._origin

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self.url.rsplit(":", 1)[1])

    @property
    def wires(self) -> tuple[str, ...]:
        """The wire formats this emulator speaks, for :meth:`base_url`."""
        return tuple(sorted(self._mounts))

    def base_url(self, wire: str) -> str:
        """The base URL to give an SDK for ``wire``.

        ``"openai"`` is what ``openai.OpenAI(base_url=...)`` expects (Responses, Files, Batches,
        Chat Completions); ``"local"`` is an OpenAI-compatible Chat Completions server (its
        health endpoint is at ``<base_url>/../health``); ``"openrouter"`` is the same surface
        at OpenRouter's paths; ``"anthropic"`` is what ``anthropic.Anthropic(base_url=...)``
        expects (Messages, token counting, Files, Message Batches, models).
        ``"gemini"`` is what ``google-genai`` takes as
        ``HttpOptions(base_url=...)`` (the SDK adds the API version); ``"azure_openai"`` is an
        Azure OpenAI resource endpoint (``Config(provider="azure_openai", base_url=...)``).

        Raises:
            EmulatorError: ``wire`` is unknown, or the emulator is not running.
        """
        if wire not in self._mounts:
            raise EmulatorError(
                f"unknown wire format {wire!r}",
                hint=f"use one of: {', '.join(self.wires)}",
            )
        return self.url + self._mounts[wire]

    def _require_running(self) -> None:
        if not self._origin:
            raise EmulatorError(
                "the emulator is not running",
                hint="use it as `with Emulator() as emu:` (or `async with`), or call start()",
            )

    def _require_in_process(self, what: str) -> None:
        if self._process:
            raise EmulatorError(
                f"{what} is not available when the emulator runs in a child process",
                hint="use Emulator(process=False) (the default) for scripted tests",
            )

    # --- the request log ----------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        self._require_in_process("the request log")
        return self._core.log.snapshot()

    def requests_for(self, selector: str) -> list[RecordedRequest]:
        """The requests whose route matches ``selector``, such as ``"openai.responses"``."""
        return [r for r in self.requests if selector_matches(selector, r.route)]

    @property
    def last_request(self) -> RecordedRequest:
        """The most recent request.

        Raises:
            EmulatorError: No request has arrived yet.
        """
        items = self.requests
        if not items:
            raise EmulatorError(
                "no request has reached the emulator",
                hint="check the client's base_url: it should be emu.base_url(<wire>)",
            )
        return items[-1]

    def clear_requests(self) -> None:
        """Forget the logged requests."""
        self._core.log.clear()

    @property
    def errors(self) -> list[str]:
        """Tracebacks of failures inside handlers or the emulator (they become 500 answers)."""
        return list(self._core.errors)

    # --- scripting ----------------------------------------------------------------------------

    def set_quota(self, wire: str, quota: EmulatorQuota | Mapping[str, Any] | None) -> None:
        """Enforce ``quota`` on ``wire``'s generate routes from now on (None lifts it).

        The windows start empty. Takes effect at once in this process; an emulator in a child
        process takes its quotas from the constructor only.

        Raises:
            EmulatorError: ``wire`` is unknown, or the emulator runs in a child process and is
                already started.
        """
        if wire not in self._mounts:
            raise EmulatorError(
                f"unknown wire format {wire!r}", hint=f"use one of: {', '.join(self.wires)}"
            )
        if self._process and self._origin:
            self._require_in_process("set_quota on a running emulator")
        if quota is not None and not isinstance(quota, EmulatorQuota):
            if not isinstance(quota, Mapping):
                raise EmulatorError(
                    f"the quota of {wire!r} must be an EmulatorQuota, a mapping or None, "
                    f"got {type(quota).__name__}",
                    hint="pass EmulatorQuota(requests=60, tokens=100_000)",
                )
            unknown = sorted(set(quota) - {"requests", "tokens", "window_s"})
            if unknown:
                raise EmulatorError(
                    f"the quota of {wire!r} has unknown keys: {', '.join(map(str, unknown))}",
                    hint="a quota mapping takes requests, tokens and window_s",
                )
            try:
                quota = EmulatorQuota(**dict(quota))
            except ValueError as exc:  # a value it cannot enforce: as a mapping's other faults
                raise EmulatorError(
                    f"the quota of {wire!r} cannot be enforced: {exc}",
                    hint="requests and tokens are whole numbers >= 1 (or None); window_s is "
                    "seconds, above 0 and at most 86400",
                ) from None
        if quota is None:
            self._core.quotas.pop(wire, None)
            self._options["quotas"].pop(wire, None)
            return
        self._core.quotas[wire] = QuotaMeter(quota)
        self._options["quotas"][wire] = quota.to_dict()

    def quota_log(self, wire: str) -> list[tuple[float, int, bool]]:
        """Every generate request ``wire``'s quota checked: ``(arrival, tokens, admitted)``.

        ``arrival`` is ``time.monotonic()`` in this process; ``tokens`` is what the request
        counts against the limit now (its estimate, or what its answer reported; see
        :class:`EmulatorQuota`). Empty without a quota.
        """
        self._require_in_process("quota_log")
        meter = self._core.quotas.get(wire)
        if meter is None:
            return []
        return [(at, round(entry[1]), admitted) for at, entry, admitted in meter.log]

    def rate_limited(self, wire: str | None = None) -> int:
        """How many generate requests a quota answered with 429 (on ``wire``, or on all)."""
        self._require_in_process("rate_limited")
        meters = self._core.quotas
        chosen = meters.values() if wire is None else [m for w, m in meters.items() if w == wire]
        return sum(int(meter.refused) for meter in chosen)

    def script(self, selector: str, *items: Scripted) -> None:
        """Queue replies and faults for the routes ``selector`` names.

        ``selector`` is a wire (``"openai"``), a route group (``"openai.responses"``) or a route
        (``"local.chat.completions"``). Each item answers one request, in order: a :class:`Reply`
        answers the next generation request, a :class:`Fault` the next request of any kind (a
        :class:`Latency` delays the request that the following item answers).

        Example:
            >>> from pollux.testing import ErrorResponse, Reply
            >>> with Emulator() as emu:
            ...     emu.script("openai.responses", ErrorResponse(429, retry_after=1), Reply("hi"))
            ...     len(emu.pending())
            2
        """
        self._require_in_process("scripting")
        self._check_selector(selector)
        self._core.scripts.add(selector, items)

    def on(self, selector: str, handler: Handler | None) -> None:
        """Install ``handler`` for the routes ``selector`` names (``None`` removes it).

        The handler gets each :class:`RecordedRequest` not answered by a queued item and returns
        a :class:`Reply`, a :class:`Fault`, or ``None`` for the default model. It runs on the
        emulator's thread.
        """
        self._require_in_process("scripting")
        self._check_selector(selector)
        self._core.scripts.on(selector, handler)

    def pending(self, selector: str | None = None) -> list[Scripted]:
        """Queued items not yet used (for ``selector``, or all)."""
        return [item for _, item in self._core.scripts.pending(selector)]

    def assert_consumed(self) -> None:
        """Fail when scripted items were left unused.

        Raises:
            AssertionError: Some queued items never answered a request.
        """
        left = self._core.scripts.pending()
        if left:
            listing = ", ".join(f"{sel}: {item!r}" for sel, item in left)
            raise AssertionError(f"{len(left)} scripted item(s) never used: {listing}")

    def reset(self) -> None:
        """Drop queued items, handlers and the request log (stored objects stay)."""
        self._core.scripts.clear()
        self._core.log.clear()

    def wire(self, name: str) -> Any:
        """The control object of wire ``name``: its stored objects and knobs.

        What it offers is the wire's own (documented with the wire); a wire without one
        gives ``None``. For example ``emu.wire("gemini").file_processing_seconds = 5``.

        Raises:
            EmulatorError: ``name`` is not a wire, or the emulator runs in a child process.
        """
        self._require_in_process("wire state")
        if name not in self._mounts:
            raise EmulatorError(
                f"unknown wire format {name!r}", hint=f"use one of: {', '.join(self.wires)}"
            )
        return self._core.state[name]

    def _check_selector(self, selector: str) -> None:
        if selector.split(".", 1)[0] not in self._mounts:
            raise EmulatorError(
                f"the selector {selector!r} names no wire format",
                hint=f"start it with one of: {', '.join(self.wires)} (e.g. 'openai.responses')",
            )

    # --- time and behaviour -------------------------------------------------------------------

    def now(self) -> float:
        """The virtual clock (seconds since the epoch)."""
        if self._child is not None:
            return self.advance(0)
        return self._clock.now()

    def advance(self, seconds: float) -> float:
        """Move the virtual clock forward (batch jobs progress, files and caches expire).

        Works in process mode too (through a control endpoint).

        Returns:
            The new virtual time.
        """
        if self._child is not None:
            if seconds < 0:
                raise ValueError(f"the emulator clock only moves forward; got {seconds!r} seconds")
            data = json.dumps({"seconds": seconds}).encode()
            request = urllib.request.Request(
                self.url + "/_emulator/advance",
                data=data,
                headers={"content-type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                return float(json.load(answer)["now"])
        return self._clock.advance(seconds)

    @property
    def latency(self) -> float:
        """Seconds added before every answer (settable while running)."""
        return self._settings.latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("latency must be >= 0 seconds")
        self._settings.latency = seconds

    def __repr__(self) -> str:
        where = self._origin or "not running"
        return f"<Emulator {where}>"


def _advance(call: Call) -> Outcome:
    seconds = call.body().get("seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
        raise ApiError(400, "'seconds' must be a number >= 0", error_type="invalid_request_error")
    return json_response({"now": call.core.clock.advance(float(seconds))})


def _control_wire() -> WireSpec:
    """Internal endpoints that let a parent process drive a child emulator's clock."""
    return WireSpec(
        "_emulator",
        "/_emulator",
        "/_emulator",
        (Route("POST", "/advance", "advance", _advance),),
        lambda error: {"error": {"message": error.message}},
        lambda headers: None,
    )
