"""Config for ephemeral runners: per-type ``mode`` and ``runner_group_id``, the ``jit``
section. An existing config keeps its meaning (persistent); the example says ephemeral."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config import load_config, parse_config
from tests.factories import config_doc, config_problems

REPO = Path(__file__).resolve().parents[2]


def doc(rt: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    body = {"labels": ["self-hosted", "gpu"], "pools": ["ci-gpu"], **(rt or {})}
    return config_doc(runner_types={"gpu": body}, **top)


def test_a_config_without_mode_stays_persistent() -> None:
    """A file written before ``mode`` existed describes machines that register their own
    runner: reading it as ephemeral would register a second runner on each of them."""
    rt = parse_config(doc(), env={}).runner_types[0]
    assert (rt.mode, rt.ephemeral, rt.runner_group_id) == ("persistent", False, 1)


def test_ephemeral_mode_and_group_are_read() -> None:
    config = parse_config(
        doc({"mode": "ephemeral", "runner_group_id": 7}, jit={"parameter_path": "/ci/jit"}),
        env={},
    )
    rt = config.runner_types[0]
    assert (rt.mode, rt.ephemeral, rt.runner_group_id) == ("ephemeral", True, 7)
    assert config.jit.parameter_name("ci-gpu", "i-0abc") == "/ci/jit/ci-gpu/i-0abc"
    assert config.jit.work_folder == "_work"


@pytest.mark.parametrize(
    ("d", "path"),
    [
        pytest.param(doc({"mode": "spot"}), "runner_types.gpu.mode", id="unknown-mode"),
        pytest.param(doc({"runner_group_id": 0}), "runner_types.gpu.runner_group_id", id="group-0"),
        pytest.param(doc(jit={"parameter_path": "ci/jit"}), "jit.parameter_path", id="relative"),
        pytest.param(doc(jit={"parameter_path": "/ci/jit/"}), "jit.parameter_path", id="trailing"),
        pytest.param(doc(jit={"work_folder": " "}), "jit.work_folder", id="empty-folder"),
        pytest.param(doc(jit={"region": "x"}), "jit.region", id="unknown-key"),
    ],
)
def test_bad_values_are_reported_with_their_path(d: dict[str, Any], path: str) -> None:
    assert any(p.startswith(path) for p in config_problems(d)), config_problems(d)


def test_every_problem_at_once() -> None:
    found = config_problems(
        doc({"mode": "spot", "runner_group_id": -1}, jit={"parameter_path": "x"})
    )
    assert len(found) == 3, found


def test_the_example_config_runs_a_type_ephemeral() -> None:
    """New configs start from config.example.yaml: it says ephemeral, the mode GitHub
    recommends for autoscaling."""
    raw = yaml.safe_load((REPO / "config.example.yaml").read_text())
    modes = {name: body.get("mode") for name, body in raw["runner_types"].items()}
    assert "ephemeral" in modes.values(), modes
    config = load_config(REPO / "config.example.yaml", env={"GITHUB_TOKEN": "x"})
    assert any(rt.ephemeral for rt in config.runner_types)
