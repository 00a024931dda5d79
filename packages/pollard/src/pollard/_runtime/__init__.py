"""Layer 5: the front door, `Runtime`/`Run` and `AsyncRuntime`/`AsyncRun`.

Thin shells that compose the step machine with stores, default meters and the governance gate.
"""

__all__: list[str] = []
