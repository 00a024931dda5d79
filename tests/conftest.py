"""Suite-wide test policy: the ``api`` and ``postgres`` markers, and offline by default."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

PROVIDER_KEY_VARS = (
    "GEMINI_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENROUTER_API_KEY",
)
POSTGRES_DSN_VAR = "POLLARD_TEST_POSTGRES_DSN"
DEFAULT_POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def postgres_dsn() -> str:
    """The DSN the PostgreSQL tests use (override with POLLARD_TEST_POSTGRES_DSN)."""
    return os.environ.get(POSTGRES_DSN_VAR, DEFAULT_POSTGRES_DSN)


def _postgres_reachable() -> bool:
    # A TCP probe is enough to decide skip vs run; the tests themselves report real failures.
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            return True
    except OSError:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    has_keys = any(os.environ.get(var) for var in PROVIDER_KEY_VARS)
    pg_ok: bool | None = None
    for item in items:
        if "api" in item.keywords and not has_keys:
            item.add_marker(
                pytest.mark.skip(reason=f"api test: set one of {', '.join(PROVIDER_KEY_VARS)}")
            )
        if "postgres" in item.keywords:
            if pg_ok is None:
                pg_ok = _postgres_reachable()
            if not pg_ok and not _in_ci():
                item.add_marker(
                    pytest.mark.skip(reason="postgres test: no server reachable at 127.0.0.1:5432")
                )


def _redis_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis URL; fails under CI=true when the server is down instead of skipping."""
    if not _redis_reachable():
        if _in_ci():
            pytest.fail("Redis is required when CI=true but 127.0.0.1:6379 is unreachable")
        pytest.skip("no Redis server reachable at 127.0.0.1:6379")
    yield os.environ.get("POLLARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    """A PostgreSQL DSN; fails under CI=true when the server is down instead of skipping."""
    if not _postgres_reachable():
        if _in_ci():
            pytest.fail("PostgreSQL is required when CI=true but 127.0.0.1:5432 is unreachable")
        pytest.skip("no PostgreSQL server reachable at 127.0.0.1:5432")
    yield postgres_dsn()
