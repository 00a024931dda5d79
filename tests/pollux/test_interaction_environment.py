from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pollux import CachePolicy, ConfigurationError, Environment, Source, ToolDeclaration


def test_environment_freezes_sequences() -> None:
    sources = [Source.from_text("a")]
    tools = [ToolDeclaration("t")]
    env = Environment(
        instructions="i", sources=sources, tools=tools, cache="auto", metadata={"k": 1}
    )
    sources.append(Source.from_text("b"))
    assert env.sources == (Source.from_text("a"),)
    assert env.tools == (ToolDeclaration("t"),)
    assert Environment().sources == () and Environment().cache is None
    with pytest.raises(AttributeError):
        env.instructions = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"instructions": 5},
        {"sources": "abc"},
        {"sources": ["text"]},
        {"tools": [{"name": "t"}]},
        {"tools": [ToolDeclaration("t"), ToolDeclaration("t")]},
        {"cache": "always"},
        {"cache": 3600},
        {"metadata": ["x"]},
    ],
)
def test_environment_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as info:
        Environment(**kwargs)  # type: ignore[arg-type]
    assert info.value.hint


def test_tool_dict_hint_mentions_from_dict() -> None:
    with pytest.raises(ConfigurationError) as info:
        Environment(tools=[{"name": "t"}])  # type: ignore[list-item]
    assert "from_dict" in (info.value.hint or "")


def test_cache_policy() -> None:
    assert CachePolicy().ttl_seconds is None
    assert CachePolicy(ttl_seconds=60).ttl_seconds == 60
    for bad in (0, -5, 1.5, True, "60"):
        with pytest.raises(ConfigurationError):
            CachePolicy(ttl_seconds=bad)  # type: ignore[arg-type]
    for setting in (None, "auto", "none", CachePolicy(ttl_seconds=10)):
        assert Environment(cache=setting).cache == setting


def _env(**overrides: object) -> Environment:
    base: dict[str, object] = {
        "instructions": "Be brief.",
        "sources": (
            Source.from_text("alpha"),
            Source.from_uri("https://x.org/a.pdf", mime_type="application/pdf"),
        ),
        "tools": (ToolDeclaration("lookup", "Look up", {"type": "object"}),),
    }
    base.update(overrides)
    return Environment(**base)  # type: ignore[arg-type]


def test_fingerprint_is_stable_and_versioned() -> None:
    fp = _env().fingerprint(provider="openai")
    assert len(fp) == 64
    assert fp == _env().fingerprint(provider="openai")
    assert fp != _env().fingerprint(provider="gemini")


def test_fingerprint_ignores_cache_and_metadata() -> None:
    fp = _env().fingerprint(provider="openai")
    assert (
        _env(cache=CachePolicy(ttl_seconds=5), metadata={"x": 1}).fingerprint(provider="openai")
        == fp
    )


@pytest.mark.parametrize(
    "change",
    [
        {"instructions": "Be verbose."},
        {"instructions": None},
        {"sources": (Source.from_text("alpha"),)},
        {
            "sources": (
                Source.from_uri("https://x.org/a.pdf", mime_type="application/pdf"),
                Source.from_text("alpha"),
            )
        },
        {
            "sources": (
                Source.from_text("beta"),
                Source.from_uri("https://x.org/a.pdf", mime_type="application/pdf"),
            )
        },
        {"tools": ()},
        {"tools": (ToolDeclaration("lookup", "Look up!", {"type": "object"}),)},
        {"tools": (ToolDeclaration("lookup", "Look up", {"type": "object"}, strict=False),)},
    ],
)
def test_fingerprint_changes_with_model_visible_fields(change: dict[str, object]) -> None:
    assert _env(**change).fingerprint(provider="openai") != _env().fingerprint(provider="openai")


def test_fingerprint_gemini_hints_only_for_gemini() -> None:
    yt = Source.from_youtube("https://youtu.be/x")
    tuned = yt.with_gemini_video_settings(fps=1)
    assert Environment(sources=[yt]).fingerprint(provider="openai") == Environment(
        sources=[tuned]
    ).fingerprint(provider="openai")
    assert Environment(sources=[yt]).fingerprint(provider="gemini") != Environment(
        sources=[tuned]
    ).fingerprint(provider="gemini")


def test_fingerprint_is_independent_of_the_files_directory(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "doc.txt").write_text("same")
    (tmp_path / "b" / "doc.txt").write_text("same")
    (tmp_path / "b" / "other.txt").write_text("same")
    fp_a = Environment(sources=[Source.from_file(tmp_path / "a" / "doc.txt")]).fingerprint(
        provider="openai"
    )
    fp_b = Environment(sources=[Source.from_file(tmp_path / "b" / "doc.txt")]).fingerprint(
        provider="openai"
    )
    fp_other = Environment(sources=[Source.from_file(tmp_path / "b" / "other.txt")]).fingerprint(
        provider="openai"
    )
    assert fp_a == fp_b
    assert fp_a != fp_other


def test_fingerprint_is_stable_across_processes() -> None:
    code = (
        "from pollux import Environment, Source, ToolDeclaration\n"
        "env = Environment(instructions='Be brief.', sources=(Source.from_text('alpha'), "
        "Source.from_uri('https://x.org/a.pdf', mime_type='application/pdf')), "
        "tools=(ToolDeclaration('lookup', 'Look up', {'type': 'object'}),))\n"
        "print(env.fingerprint(provider='openai'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == _env().fingerprint(provider="openai")


@pytest.mark.parametrize("provider", ["", None, 3])
def test_fingerprint_needs_a_provider(provider: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        Environment().fingerprint(provider=provider)  # type: ignore[arg-type]
    assert info.value.hint


def test_fingerprint_golden_vectors() -> None:
    # Pinned values: a change here breaks durable identities (pollard replay, caches) and
    # must come with a FINGERPRINT_VERSION bump.
    env = Environment(
        instructions="Be brief.",
        sources=(
            Source.from_text("alpha"),
            Source.from_uri("https://x.org/a.pdf", mime_type="application/pdf"),
            Source.from_youtube("https://youtu.be/x").with_gemini_video_settings(fps=1),
        ),
        tools=(ToolDeclaration("lookup", "Look up", {"type": "object"}),),
    )
    assert env.fingerprint(provider="openai") == (
        "a185dde7d5428b433da5a224fdf38aefc005eaf529fe679eed61503e82e64c05"
    )
    assert env.fingerprint(provider="gemini") == (
        "b81222c4a61b5fc9dd6e23ffb19b7a6149b639e60aeaf4ce406f0519302374f3"
    )
