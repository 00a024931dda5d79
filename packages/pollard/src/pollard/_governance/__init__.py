"""Layer 4: the registry firewall (a gate the shells inject into the step machine), schemas."""

__all__: list[str] = []
