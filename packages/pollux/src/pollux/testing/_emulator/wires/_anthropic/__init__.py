"""The Anthropic API's pieces, one module per job; ``wires/anthropic.py`` mounts them."""
