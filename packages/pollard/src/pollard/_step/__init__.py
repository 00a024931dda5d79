"""Layer 3: the step machine, one generator of effects per operation, shared by both shells."""

__all__: list[str] = []
