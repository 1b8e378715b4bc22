"""The emulated fleet and this project's policy in it, on traces small enough to reckon by hand.

Boot times are fixed (p50 == p95) so every number below is exact.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest

from autoscaler.config import Config
from autoscaler.config.simulation import BootTime
from autoscaler.sim.emulator import Emulator, lognormal
from autoscaler.sim.metrics import percentile
from autoscaler.sim.simulate import simulate
from autoscaler.sim.trace import Trace, parse_trace
from tests.factories import load_config

CPU = ["self-hosted", "cpu"]


def config(simulation: dict[str, Any] | None = None, **runner_type: Any) -> Config:
    return load_config(
        poll_interval="30s",
        runner_types={
            "cpu": {"labels": CPU, "pools": ["p1", "p2"], "idle_timeout": "2m", **runner_type}
        },
        simulation={"boot_time": {"p50": "60s", "p95": "60s"}, **(simulation or {})},
    )


def trace(*jobs: tuple[float, float], labels: list[str] = CPU) -> Trace:
    return parse_trace(
        json.dumps({"created_at": at, "labels": labels, "duration": d}) for at, d in jobs
    )


def test_one_job_waits_for_the_next_poll_and_one_boot() -> None:
    """Queued at 10 s; the tick at 30 s scales up; the runner registers at 90 s."""
    r = simulate(config(), trace((10, 100)))
    assert r.p50_queue_seconds == r.p95_queue_seconds == 80.0
    assert r.end_seconds == 190.0
    assert r.runner_hours * 3600 == pytest.approx(160.0)  # launch at 30 s to the end
    assert r.boot_hours * 3600 == pytest.approx(60.0) and r.idle_runner_hours == 0.0
    assert r.cost_ratio == pytest.approx(1.0)
    assert r.scale_actions == 1 and r.instances_launched == 1


def test_reaction_decides_a_second_after_the_job_is_queued() -> None:
    r = simulate(config({"reaction": "1s"}), trace((10, 100)))
    assert r.p95_queue_seconds == 61.0


def test_an_idle_runner_goes_after_idle_timeout_and_a_later_job_boots_a_new_one() -> None:
    """Idle from 190 s, first seen idle at the 210 s tick, scaled in at 330 s (2 min)."""
    r = simulate(config(), trace((10, 100), (1000, 10)))
    assert r.instances_launched == 2
    assert r.idle_runner_hours * 3600 == pytest.approx(140.0)
    assert r.runner_hours * 3600 == pytest.approx((330 - 30) + (1090 - 1020))
    assert r.lower_bound_hours * 3600 == pytest.approx(110 + 120)


def test_a_job_arriving_while_a_runner_is_idle_starts_at_once() -> None:
    r = simulate(config(), trace((10, 100), (200, 10)))
    assert r.instances_launched == 1
    # waits 80 s and 0 s: interpolated percentiles
    assert r.p50_queue_seconds == 40.0 and r.p95_queue_seconds == pytest.approx(76.0)


def test_a_pool_out_of_capacity_fails_over_one_tick_later() -> None:
    """AWS accepts the scale-up of p1 at 30 s and reports a Failed activity; the 60 s tick
    sees it, releases p1 and scales p2 up: the job waits one more tick."""
    outage = {"outages": [{"pool": "p1", "from": "0s", "to": "1h"}]}
    r = simulate(config(outage), trace((10, 100)))
    assert r.p95_queue_seconds == 110.0
    assert r.scale_actions == 3  # p1 up, p1 released, p2 up
    assert r.runner_hours * 3600 == pytest.approx(220 - 60)


def test_jobs_no_pool_serves_are_counted_apart() -> None:
    r = simulate(config(), parse_trace(['{"created_at": 5, "labels": ["gpu"], "duration": 9}']))
    assert r.jobs == 0 and r.unserved == 1 and r.p95_queue_seconds == 0.0


def test_github_gives_the_oldest_queued_job_to_a_free_runner_one_at_a_time() -> None:
    em = Emulator(config(), trace((0, 10), (5, 10), (6, 10)))
    em.set_desired(em.pools["p1"], 1)  # one runner, registered at 60 s
    em.run()
    assert [(j.started, j.finished) for j in em.jobs] == [(60, 70), (70, 80), (80, 90)]


def test_an_ephemeral_runner_terminates_with_its_job() -> None:
    em = Emulator(config(), trace((0, 10)))
    em.ephemeral = True
    em.set_desired(em.pools["p1"], 1)
    em.run()
    (inst,) = em.instances
    assert inst.terminated == 70.0 and em.pools["p1"].desired == 0


def test_a_group_in_an_outage_launches_what_it_lacks_once_the_outage_ends() -> None:
    em = Emulator(config({"outages": [{"pool": "p1", "from": "0s", "to": "100s"}]}), trace((0, 10)))
    em.set_desired(em.pools["p1"], 1)
    assert em.instances == [] and len(em.pools["p1"].failed) == 1
    state = em.pool_states()["p1"]
    assert state.desired_capacity == 1 and state.live_instances == 0 and state.activities
    em.run()
    assert [i.launched for i in em.instances] == [100.0]


def test_terminating_a_busy_runner_is_a_bug_the_emulator_refuses() -> None:
    em = Emulator(config(), trace((0, 500)))
    em.set_desired(em.pools["p1"], 1)
    em.start()
    em.clock.run(until=lambda: em.jobs[0].started is not None, limit=100)
    with pytest.raises(RuntimeError, match="busy"):
        em.terminate(em.instances[0])


def test_boot_times_follow_the_fitted_lognormal_and_repeat_per_pool() -> None:
    c = config({"boot_time": {"p50": "90s", "p95": "240s"}, "seed": 3})
    first = Emulator(c, trace((0, 1))).pools["p1"]
    samples = [first.boot_time() for _ in range(20000)]
    assert statistics.median(samples) == pytest.approx(90, rel=0.03)
    assert percentile(samples, 95) == pytest.approx(240, rel=0.05)
    again = Emulator(c, trace((0, 1))).pools["p1"]
    assert [again.boot_time() for _ in range(5)] == samples[:5]
    mu, sigma = lognormal(BootTime(p50=90, p95=90))
    assert sigma == 0.0 and mu == pytest.approx(4.49980967)


def test_every_policy_replays_the_same_jobs_to_completion() -> None:
    from autoscaler.sim.simulate import POLICIES  # noqa: PLC0415

    jobs = [(t * 37.0 % 3000, 60 + t % 7 * 30) for t in range(60)]
    for name in POLICIES:
        r = simulate(config(max=20), trace(*jobs), name)
        assert r.jobs == 60 and r.unfinished == 0, name
        assert r.runner_hours >= r.lower_bound_hours - 1e-9, name
