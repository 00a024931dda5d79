from __future__ import annotations

from pollux.testing.fixtures import emulator

__all__ = ["emulator"]
