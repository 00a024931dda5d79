"""Bounded stress campaigns: ``make stress`` or ``python -m stress [NAME ...]``.

Not part of ``make test``.
"""
