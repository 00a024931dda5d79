"""pytest plugin for pollard (registered through the ``pytest11`` entry point).

Loaded in every pytest session where pollard is installed, so it must stay cheap to import.
"""

from __future__ import annotations
