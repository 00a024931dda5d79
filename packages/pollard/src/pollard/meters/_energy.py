"""``EnergyMeter``: joules of local GPU inference from NVML (``pollard[nvml]``)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

from pollard.errors import PollardError

__all__ = ["EnergyMeter", "EnergyReading"]

_INSTALL = 'EnergyMeter needs the nvml extra: pip install "pollard[nvml]"'


class EnergyReading:
    """The joules measured around one step (``readings()`` is merged into node meta)."""

    def __init__(self) -> None:
        self.joules: Decimal | None = None

    def readings(self) -> dict[str, Any]:
        """Return ``{"joules": "<decimal>"}`` once measured, else an empty dict."""
        return {} if self.joules is None else {"joules": str(self.joules)}


class EnergyMeter:
    """Charge the GPU energy used while your step function runs (local inference only).

    It reads NVML's cumulative energy counter (millijoules) before and after the call. The counter
    covers the whole GPU, so concurrent work on the same device is included. Hosted API calls use
    no local GPU energy and are not measured.

    Args:
        index: The NVML device index.
        interval_s: pollard 0.8's sampling interval (seconds, > 0). This meter reads NVML's
            cumulative counter before and after each step, so it needs no sampling; the value is
            validated and kept as ``interval_s`` for code written against 0.8.
        nvml: An object with the ``pynvml`` API (for tests); imported when omitted.
        name: The meter name.

    Raises:
        ImportError: Naming ``pip install "pollard[nvml]"`` when NVML bindings are missing.
        PollardError: When no NVIDIA GPU or driver is available, or the device has no energy
            counter.
    """

    precheck_is_estimate = False

    def __init__(
        self,
        index: int = 0,
        *,
        interval_s: float = 0.05,
        nvml: Any = None,
        name: str = "joules",
    ) -> None:
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)):
            raise TypeError(f"interval_s must be a number, got {type(interval_s).__name__}")
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = float(interval_s)
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise ImportError(_INSTALL) from exc
        self.name = name
        self._nvml = nvml
        try:
            nvml.nvmlInit()
            self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
            nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except Exception as exc:
            raise PollardError(
                f"EnergyMeter cannot read GPU {index} energy through NVML: {exc}",
                hint="EnergyMeter measures local NVIDIA GPU inference only; drop it on machines "
                "without an NVIDIA driver and GPU",
            ) from exc

    def _millijoules(self) -> int:
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))

    @contextmanager
    def measure(self) -> Iterator[EnergyReading]:
        """Measure the energy used inside the ``with`` block."""
        reading = EnergyReading()
        start = self._millijoules()
        try:
            yield reading
        finally:
            reading.joules = Decimal(self._millijoules() - start) / Decimal(1000)

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Decimal:
        """Return the joules recorded in ``meta["joules"]`` (0 when not measured)."""
        value = meta.get("joules")
        return Decimal(str(value)) if value is not None else Decimal(0)

    def precheck_estimate(self, kind: str, payload: Any) -> None:
        """Return None (energy cannot be known in advance)."""
        return None

    def __repr__(self) -> str:
        return f"EnergyMeter(name={self.name!r})"
