"""requirements.lock, the image's dependencies: current with pyproject.toml, every pin
hashed, and what the Dockerfile installs from, on a base image pinned by digest.

Story: the image's base was a tag and every dependency floated (``>=``, no lock file), so
two builds of one commit could differ."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def pins() -> dict[str, tuple[str, list[str]]]:
    """Name -> (version, hashes), from the lock's ``name==version \\`` entries."""
    out: dict[str, tuple[str, list[str]]] = {}
    text = LOCK.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if line.startswith(("#", " ", "--")) or not line.strip():
            continue
        name, _, rest = line.partition("==")
        version, *options = rest.split()
        hashes = [o.removeprefix("--hash=") for o in options if o.startswith("--hash=sha256:")]
        out[canonicalize_name(name)] = (version, hashes)
    return out


def dependencies() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(d) for d in project["dependencies"]]


@pytest.mark.parametrize("requirement", dependencies(), ids=str)
def test_every_dependency_is_pinned_within_its_range(requirement: Requirement) -> None:
    """pyproject.toml asks for it, so the lock pins it, at a version it accepts (run
    ``make lock`` after changing the dependencies)."""
    locked = pins().get(canonicalize_name(requirement.name))
    assert locked is not None, f"{requirement.name} is not in requirements.lock: make lock"
    assert requirement.specifier.contains(locked[0], prereleases=True), (
        f"{requirement.name}=={locked[0]} is outside {requirement.specifier}: make lock"
    )


def test_every_pin_carries_hashes() -> None:
    found = pins()
    assert len(found) >= len(dependencies())
    assert not [name for name, (_, hashes) in found.items() if not hashes]


def test_the_lock_says_how_it_was_made() -> None:
    header = LOCK.read_text().split("\n\n", 1)[0]
    assert "pip-compile" in header and "--generate-hashes" in header
    assert "pyproject.toml" in header


def test_the_dockerfile_installs_from_the_lock_on_digest_pinned_bases() -> None:
    text = (ROOT / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    bases = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert bases
    for base in bases:
        image = args.get(base.strip("${}"), base)
        assert DIGEST.search(image), f"FROM {base} ({image}) has no digest"
    assert "COPY requirements.lock" in text
    assert "--require-hashes" in text and "-r requirements.lock" in text
    assert "ci_autoscaler-*.whl" in text
    wheel_install = re.search(r"pip install[^\n]*--no-deps[^\n]*ci_autoscaler-\*\.whl", text)
    assert wheel_install, "the wheel is installed without pulling unpinned dependencies"
