"""``pollard.meters.energy``: where pollard 0.8 kept `EnergyMeter` (also in `pollard.meters`)."""

from __future__ import annotations

from pollard.meters._energy import EnergyMeter, EnergyReading

__all__ = ["EnergyMeter", "EnergyReading"]
