"""The scaling bench's verdict on one trace: the aims it states, judged on the equal-knobs
results beside the oracle (the figures come from ``make bench``; here, what each aim
means)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from autoscaler.sim.metrics import PolicyResult
from autoscaler.sim.oracle import Floor, TypeFloor
from autoscaler.sim.trace import DEFAULT_START, Trace
from bench.scaling import Case, Outcome, cold_start_p95, judge
from tests.factories import load_config

CONFIG = load_config(
    runner_types={"cpu": {"labels": ["self-hosted"], "pools": ["p"]}},
    simulation={
        "boot_time": {"p50": "90s", "p95": "90s"},
        "launch_time": {"p50": "10s", "p95": "10s"},
    },
)
#: Boot + launch exactly 100 s, polls every 30 s: the p95 aim is 130 s.
AIM = 130.0
ORACLE = Floor((TypeFloor("cpu", 10, 90.0, 100.0, ()),))


def result(name: str, p95: float, hours: float) -> PolicyResult:
    return PolicyResult(name, 1, 0, 0, 0.0, p95, p95, 0, hours, 0.0, 0.0, hours, 0, 0, 0.0)


@dataclass(frozen=True)
class Verdict:
    ours: tuple[float, float]
    peer: tuple[float, float]
    missed: list[str]


@pytest.mark.parametrize(
    "case",
    [
        Verdict((100.0, 105.0), (90.0, 108.0), []),
        Verdict((100.0, 105.0), (90.0, 104.0), ["peer (equal knobs) beats it on both"]),
        Verdict((100.0, 105.0), (100.0, 104.0), []),
        Verdict((131.0, 105.0), (200.0, 200.0), ["p95 131s > cold start p95 + poll = 130s"]),
        Verdict((100.0, 110.5), (200.0, 200.0), ["runner-hours 1.105x the oracle's > 1.1x"]),
        Verdict((100.0, 110.0), (200.0, 200.0), []),
    ],
    ids=[
        "peer-cheaper-but-slower-met",
        "peer-dominates-missed",
        "a-tie-on-p95-is-no-domination",
        "p95-over-one-cold-start-and-a-poll",
        "over-1.10x-the-oracle",
        "at-1.10x-the-oracle-met",
    ],
)
def test_the_aims_of_one_trace(case: Verdict) -> None:
    ours = result("ci-autoscaler", *case.ours)
    peer = result("peer", *case.peer)
    case_ = Case("t", CONFIG, Trace(DEFAULT_START, ()))
    outcome = Outcome(case_, ORACLE, [ours, peer], [ours, peer])
    missed = judge(outcome)
    assert len(missed) == len(case.missed)
    assert all(m.startswith(text) for m, text in zip(missed, case.missed, strict=True))


def test_the_p95_aim_is_a_cold_start_p95_plus_a_poll() -> None:
    assert cold_start_p95(CONFIG) + CONFIG.poll_interval == pytest.approx(AIM)
