"""Benchmarks: run with `make bench`. They print a table and write JSON; they are never tests."""
