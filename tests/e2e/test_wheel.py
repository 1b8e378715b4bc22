"""The wheel as a user installs it: built from the repository, installed into a fresh
virtualenv (its dependencies from the package index, nothing from this checkout), then
run from a directory that holds nothing but a copy of the example config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config.example.yaml"


def run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.pop("GITHUB_TOKEN", None)
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``ci-autoscaler`` script of the wheel installed in a fresh virtualenv."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheels = tmp / "wheels"
    done = run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), "."],
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = wheels.glob("ci_autoscaler-*.whl")
    venv = tmp / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    done = run([base, "-m", "venv", str(venv)], cwd=tmp)
    assert done.returncode == 0, done.stderr
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    done = run([*pip, "--disable-pip-version-check", str(wheel)], cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin" / "ci-autoscaler"


def test_the_wheel_carries_the_shipped_rules_and_checks_the_example_anywhere(
    installed: Path, tmp_path: Path
) -> None:
    (tmp_path / "config.example.yaml").write_text(EXAMPLE.read_text())
    done = run(
        [str(installed), "check-config", "--allow-unset-env", "config.example.yaml"],
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "config.example.yaml: ok (2 runner types, 2 alert rules, 1 receiver)\n"
