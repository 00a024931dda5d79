"""The wheels a release would upload: names, versions, extras, LICENSE, URLs and classifiers.

Built offline with the build backend itself (hatchling, a dev dependency), the way ``uv build``
builds them, so what is checked is the metadata a user's ``pip install`` reads.
"""

from __future__ import annotations

import email
import subprocess
import sys
import zipfile
from email.message import Message
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]

# What the registry already holds under each name (docs/getting-started/install.md): a release
# must sort above these for `pip install NAME` to pick it.
REGISTRY_NEWEST = {"pollux-ai": Version("2.0.0"), "pollard": Version("1.6.2")}


def _wheel(package: str, tmp_path: Path) -> Path:
    out = tmp_path / package
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(out)],
        cwd=ROOT / "packages" / package,
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Message, list[str]]]:
    tmp = tmp_path_factory.mktemp("wheels")
    built: dict[str, tuple[Message, list[str]]] = {}
    for package in ("pollux", "pollard"):
        with zipfile.ZipFile(_wheel(package, tmp)) as archive:
            names = archive.namelist()
            (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
            built[package] = (email.message_from_bytes(archive.read(meta)), names)
    return built


@pytest.mark.parametrize(
    ("package", "distribution"), [("pollux", "pollux-ai"), ("pollard", "pollard")]
)
def test_distribution_names_and_versions_would_resolve(
    wheels: dict[str, tuple[Message, list[str]]], package: str, distribution: str
) -> None:
    meta, names = wheels[package]
    assert meta["Name"] == distribution
    # A published final release of this line sorts above the registry's newest release.
    release = Version(Version(meta["Version"]).base_version)
    assert release > REGISTRY_NEWEST[distribution]
    # The import name is unchanged.
    assert f"{package}/__init__.py" in names


@pytest.mark.parametrize("package", ["pollux", "pollard"])
def test_wheels_carry_license_urls_and_classifiers(
    wheels: dict[str, tuple[Message, list[str]]], package: str
) -> None:
    meta, names = wheels[package]
    (license_file,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert license_file
    assert (ROOT / "packages" / package / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    urls = dict(value.split(", ", 1) for value in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= set(urls)
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Typing :: Typed" in classifiers
    assert meta["License-Expression"] == "MIT"


def test_cli_extra_brings_pollard_with_its_prices(
    wheels: dict[str, tuple[Message, list[str]]],
) -> None:
    # `pip install "pollux-ai[cli]"` then the README's `--max-usd` needs genai-prices.
    meta, _ = wheels["pollux"]
    requirements = [Requirement(value) for value in meta.get_all("Requires-Dist") or []]
    cli = [r for r in requirements if r.marker is not None and r.marker.evaluate({"extra": "cli"})]
    pollard = next(r for r in cli if r.name == "pollard")
    assert "prices" in pollard.extras
    # The pin admits this workspace's pollard (a dev pre-release) and refuses the 1.x line.
    assert pollard.specifier.contains("2.0.0.dev0", prereleases=True)
    assert not pollard.specifier.contains("1.6.2")
    pollard_meta, _ = wheels["pollard"]
    bridge = [Requirement(v) for v in pollard_meta.get_all("Requires-Dist") or [] if "pollux" in v]
    assert [r.name for r in bridge] == ["pollux-ai"]
