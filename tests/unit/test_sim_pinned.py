"""Every policy's replay of one seeded scenario, pinned: a faster simulator changes no result.

The scenario has what makes the emulator's bookkeeping hard: two runner types, a type
with two pools whose first is out of capacity while a GPU matrix lands, a CPU matrix
larger than one scaling activity launches, lognormal boots, billing minimums and the
poll's latency. ``sim_pinned.json`` holds each policy's ``simulate --output json`` row,
as shipped and at equal knobs, and the oracle's. A change that is only meant to make
the replay faster must leave every figure as it was; a change to a policy's rule or to
the world rewrites the file on purpose (``python -m tests.unit.test_sim_pinned``) and
says so in its commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from autoscaler.config import Config
from autoscaler.sim import shapes
from autoscaler.sim.oracle import floor
from autoscaler.sim.simulate import POLICIES, simulate
from autoscaler.sim.trace import Trace
from tests.factories import load_config

PINNED = Path(__file__).with_name("sim_pinned.json")


def scenario() -> tuple[Config, Trace]:
    config = load_config(
        poll_interval="30s",
        runner_types={
            "cpu": {"labels": list(shapes.CPU), "pools": ["ci-cpu"], "max": 120},
            "gpu": {
                "labels": list(shapes.GPU),
                "pools": ["gpu-spot", "gpu-ondemand"],
                "max": 40,
            },
        },
        simulation={
            "seed": 7,
            "boot_time": {"p50": "90s", "p95": "240s"},
            "outages": [{"pool": "gpu-spot", "from": "11h", "to": "11h40m"}],
        },
    )
    trace = shapes.generate(
        [
            shapes.JobMix(shapes.CPU, 2.5, 0.2, 300.0, 1200.0),
            shapes.JobMix(shapes.GPU, 0.3, 0.05, 1200.0, 3600.0, run_sizes=(1, 1, 2, 4)),
        ],
        [
            shapes.Burst(10.5 * 3600.0, 150, shapes.CPU, 400.0, 900.0),
            shapes.Burst(11.2 * 3600.0, 30, shapes.GPU, 900.0, 2400.0),
        ],
        days=0.125,
        seed=17,
        from_hour=9.0,
    )
    return config, trace


def replay_all() -> dict[str, Any]:
    config, trace = scenario()
    oracle = floor(config, trace)
    out: dict[str, Any] = {"oracle": [t.as_json() for t in oracle.types]}
    for equal in (False, True):
        for name in POLICIES:
            result = simulate(config, trace, name, equal_knobs=equal)
            row = result.as_json(oracle)
            row["end_seconds"] = round(result.end_seconds, 3)
            out[name + (" (equal knobs)" if equal else "")] = row
    return out


@pytest.fixture(scope="module")
def replayed() -> dict[str, Any]:
    return replay_all()


KEYS = ["oracle", *POLICIES, *(f"{name} (equal knobs)" for name in POLICIES)]


@pytest.mark.parametrize("key", KEYS)
def test_a_replay_gives_the_pinned_figures(replayed: dict[str, Any], key: str) -> None:
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))
    assert replayed[key] == pinned[key]


def test_the_pinned_scenario_exercises_every_policy_and_the_outage() -> None:
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))
    assert sorted(pinned) == sorted(KEYS)
    ours = pinned["ci-autoscaler"]
    assert ours["unfinished_jobs"] == 0 and ours["jobs"] > 500
    assert ours["runner_types"][1]["p95_queue_seconds"] > 0  # the GPU matrix waited


if __name__ == "__main__":
    PINNED.write_text(json.dumps(replay_all(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    sys.stdout.write(f"wrote {PINNED}\n")
