"""Internals of the ``pollard`` command line (see :mod:`pollard.cli`)."""
