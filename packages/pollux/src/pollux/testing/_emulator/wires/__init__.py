"""Wire formats, one module each; every public module here exports ``WIRES``.

Adding a provider's wire format means adding one module with a ``WIRES`` tuple of
:class:`~pollux.testing._emulator._core.WireSpec`; discovery picks it up, no other module changes.
"""

from __future__ import annotations

import importlib
import pkgutil

from pollux.testing._emulator._core import WireSpec


def load_wires() -> list[WireSpec]:
    """Every wire format defined in this package, in module-name order."""
    specs: list[WireSpec] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        specs.extend(getattr(module, "WIRES", ()))
    return specs
