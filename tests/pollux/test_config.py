from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import random
from pathlib import Path

import pytest

from pollux import Config, ConfigurationError, RetryPolicy
from pollux.config import KNOWN_CAPABILITIES, resolve_api_key

KEY_VARS = ("GEMINI_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in (*KEY_VARS, "POLLUX_LOCAL_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)


def test_defaults() -> None:
    cfg = Config(provider="openai", model="gpt-5-nano", api_key="sk")
    assert cfg.request_concurrency == 6
    assert cfg.request_timeout_s == 300.0
    assert cfg.retry == RetryPolicy()
    assert cfg.use_mock is False
    assert cfg.base_url is None
    assert cfg.capabilities is None


@pytest.mark.parametrize(
    ("provider", "var"),
    [
        ("gemini", "GEMINI_API_KEY"),
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("openrouter", "OPENROUTER_API_KEY"),
    ],
)
def test_api_key_from_environment(monkeypatch: pytest.MonkeyPatch, provider: str, var: str) -> None:
    monkeypatch.setenv(var, "from-env")
    assert Config(provider=provider, model="m").api_key == "from-env"  # type: ignore[arg-type]
    assert Config(provider=provider, model="m", api_key="explicit").api_key == "explicit"  # type: ignore[arg-type]


def test_missing_key_names_the_env_var() -> None:
    with pytest.raises(ConfigurationError) as info:
        Config(provider="anthropic", model="claude-haiku-4-5")
    assert "ANTHROPIC_API_KEY" in (info.value.hint or "")


def test_dotenv_is_read_without_mutating_environ(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "# comment\nexport OPENAI_API_KEY='dot-key'\nGEMINI_API_KEY=g # trailing\n"
    )
    assert Config(provider="openai", model="m").api_key == "dot-key"
    assert Config(provider="gemini", model="m").api_key == "g"
    assert "OPENAI_API_KEY" not in os.environ
    assert resolve_api_key("local") is None


def test_dotenv_in_parent_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text('OPENROUTER_API_KEY="parent"\n')
    child = tmp_path / "a" / "b"
    child.mkdir(parents=True)
    monkeypatch.chdir(child)
    assert Config(provider="openrouter", model="m").api_key == "parent"


def test_environment_wins_over_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("OPENAI_API_KEY=dot\n")
    monkeypatch.setenv("OPENAI_API_KEY", "env")
    assert Config(provider="openai", model="m").api_key == "env"


def test_mock_needs_no_key() -> None:
    assert Config(provider="gemini", model="m", use_mock=True).api_key is None


def test_unknown_provider() -> None:
    with pytest.raises(ConfigurationError, match="Unknown provider") as info:
        Config(provider="bedrock", model="m", api_key="k")  # type: ignore[arg-type]
    assert "openai" in (info.value.hint or "")


@pytest.mark.parametrize("provider", ["gemini", "openai", "anthropic", "openrouter"])
def test_model_required_for_cloud(provider: str) -> None:
    with pytest.raises(ConfigurationError, match="model required"):
        Config(provider=provider, api_key="k")  # type: ignore[arg-type]


@pytest.mark.parametrize("model", ["", 3])
def test_model_must_be_a_non_empty_string(model: object) -> None:
    with pytest.raises(ConfigurationError, match="model"):
        Config(provider="openai", model=model, api_key="k")  # type: ignore[arg-type]


def test_base_url_rejected_for_cloud() -> None:
    with pytest.raises(ConfigurationError, match="only valid for provider='local'"):
        Config(provider="openai", model="m", api_key="k", base_url="http://x")


def test_local_requires_base_url() -> None:
    with pytest.raises(ConfigurationError, match="base_url required") as info:
        Config(provider="local")
    assert "POLLUX_LOCAL_BASE_URL" in (info.value.hint or "")


def test_local_base_url_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLLUX_LOCAL_BASE_URL", "http://127.0.0.1:8080/v1")
    cfg = Config(provider="local")
    assert cfg.base_url == "http://127.0.0.1:8080/v1"
    assert cfg.model is None and cfg.api_key is None


def test_local_model_optional_and_mock_needs_no_url() -> None:
    assert Config(provider="local", base_url="http://localhost:1/v1", model="qwen").model == "qwen"
    assert Config(provider="local", use_mock=True).base_url is None


def test_local_base_url_must_be_http() -> None:
    with pytest.raises(ConfigurationError, match="http"):
        Config(provider="local", base_url="localhost:8080")


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "4"])
def test_request_concurrency_validation(value: object) -> None:
    with pytest.raises(ConfigurationError, match="request_concurrency"):
        Config(provider="openai", model="m", api_key="k", request_concurrency=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1.0, "10", True, float("nan")])
def test_request_timeout_validation(value: object) -> None:
    with pytest.raises(ConfigurationError, match="request_timeout_s"):
        Config(provider="openai", model="m", api_key="k", request_timeout_s=value)  # type: ignore[arg-type]


def test_retry_must_be_a_policy() -> None:
    with pytest.raises(ConfigurationError, match="RetryPolicy"):
        Config(provider="openai", model="m", api_key="k", retry={"max_attempts": 3})  # type: ignore[arg-type]


def test_capabilities_overrides() -> None:
    caps = {"structured_outputs": False, "uploads": True}
    cfg = Config(provider="local", base_url="http://x/v1", capabilities=caps)
    caps["uploads"] = False  # the config keeps its own copy
    assert cfg.capability_override("uploads") is True
    assert cfg.capability_override("structured_outputs") is False
    assert cfg.capability_override("reasoning") is None
    assert hash(cfg) == hash(
        Config(provider="local", base_url="http://x/v1", capabilities=dict(cfg.capabilities or {}))
    )


def test_a_config_with_overrides_pickles_and_copies() -> None:
    cfg = Config(provider="local", base_url="http://x/v1", capabilities={"uploads": False})
    for clone in (pickle.loads(pickle.dumps(cfg)), copy.deepcopy(cfg)):
        assert clone == cfg
        assert clone.capability_override("uploads") is False
    assert dataclasses.asdict(cfg)["capabilities"] == {"uploads": False}
    with pytest.raises(TypeError):
        cfg.capabilities["uploads"] = True  # type: ignore[index]


def test_capabilities_known_names() -> None:
    assert "persistent_cache" in KNOWN_CAPABILITIES
    with pytest.raises(ConfigurationError, match="Unknown capability") as info:
        Config(provider="local", base_url="http://x/v1", capabilities={"teleport": True})
    assert "structured_outputs" in (info.value.hint or "")
    with pytest.raises(ConfigurationError, match="True or False"):
        Config(provider="local", base_url="http://x/v1", capabilities={"uploads": 1})  # type: ignore[dict-item]


def test_repr_and_str_never_show_the_key() -> None:
    cfg = Config(provider="openai", model="m", api_key="sk-very-secret")
    for text in (repr(cfg), str(cfg), f"{cfg}", repr([cfg])):
        assert "sk-very-secret" not in text
        assert "[REDACTED]" in text


def test_config_is_frozen() -> None:
    cfg = Config(provider="openai", model="m", api_key="k")
    with pytest.raises(AttributeError):
        cfg.model = "other"  # type: ignore[misc]


# --------------------------------------------------------------------------- RetryPolicy


def test_retry_defaults() -> None:
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.initial_delay_s, policy.backoff_multiplier) == (2, 0.5, 2.0)
    assert (policy.max_delay_s, policy.jitter, policy.max_elapsed_s) == (5.0, True, 15.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": 1.5},
        {"max_attempts": True},
        {"initial_delay_s": -0.1},
        {"backoff_multiplier": 0},
        {"max_delay_s": -1},
        {"max_elapsed_s": -1},
        {"jitter": "yes"},
        {"initial_delay_s": float("nan")},
    ],
)
def test_retry_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError) as info:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ConfigurationError)
    assert info.value.hint


def test_retry_backoff_is_exponential_and_capped() -> None:
    policy = RetryPolicy(max_attempts=10, jitter=False, initial_delay_s=1.0, max_delay_s=5.0)
    assert [policy.delay_for(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert policy.backoff_s(10_000) == 5.0  # no overflow


def test_retry_full_jitter_stays_in_range() -> None:
    policy = RetryPolicy(max_attempts=5, initial_delay_s=1.0)
    rng = random.Random(7)
    delays = [policy.delay_for(3, rng=rng) for _ in range(200)]
    assert all(0.0 <= d <= 4.0 for d in delays)
    assert len(set(delays)) > 100


def test_retry_after_wins_when_longer() -> None:
    policy = RetryPolicy(max_attempts=3, jitter=False)
    assert policy.delay_for(1, retry_after_s=8.0) == 8.0
    assert policy.delay_for(1, retry_after_s=0.1) == 0.5


def test_next_delay_stops_on_attempts_and_deadline() -> None:
    policy = RetryPolicy(max_attempts=3, jitter=False, max_elapsed_s=10.0)
    assert policy.next_delay(1, elapsed_s=0.0) == 0.5
    assert policy.next_delay(3, elapsed_s=0.0) is None
    assert policy.next_delay(1, elapsed_s=10.0) is None
    assert policy.next_delay(1, elapsed_s=9.0, retry_after_s=30.0) == pytest.approx(1.0)
    assert (
        RetryPolicy(max_attempts=3, jitter=False, max_elapsed_s=None).next_delay(2, elapsed_s=1e9)
        == 1.0
    )
    with pytest.raises(ConfigurationError):
        policy.backoff_s(0)
