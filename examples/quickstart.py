"""The main job, offline: no keys, no network.

Placeholder: the repository foundation is in place; the real fan-out over the mock provider and the
governed pollard run arrive with the engine and pollard core work.
"""

from __future__ import annotations

import pollard
import pollux


def main() -> None:
    print(f"pollux {pollux.__version__} and pollard {pollard.__version__} are installed.")
    print("This demo is a placeholder: the offline main job lands with the engine and core work.")


if __name__ == "__main__":
    main()
