"""The emulated fleet and this project's policy in it, on traces small enough to reckon by hand.

Boot and launch times are fixed (p50 == p95), the poll's answers are fresh and billing has
no minimum unless a test says otherwise, so every number below is exact: an instance
asked for at ``t`` runs at ``t + 10`` (billed from then) and registers at ``t + 70``.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest

from autoscaler.config import Config
from autoscaler.config.simulation import BootTime
from autoscaler.sim.emulator import Emulator
from autoscaler.sim.entities import lognormal
from autoscaler.sim.metrics import percentile
from autoscaler.sim.simulate import simulate
from autoscaler.sim.trace import Trace, parse_trace
from tests.factories import load_config

CPU = ["self-hosted", "cpu"]
EXACT = {
    "boot_time": {"p50": "60s", "p95": "60s"},
    "launch_time": {"p50": "10s", "p95": "10s"},
    "poll_latency": "0s",
    "billing_minimum": "0s",
}


def config(simulation: dict[str, Any] | None = None, **runner_type: Any) -> Config:
    return load_config(
        poll_interval="30s",
        runner_types={
            "cpu": {"labels": CPU, "pools": ["p1", "p2"], "idle_timeout": "2m", **runner_type}
        },
        simulation={**EXACT, **(simulation or {})},
    )


def trace(*jobs: tuple[float, float], labels: list[str] = CPU) -> Trace:
    return parse_trace(
        json.dumps({"created_at": at, "labels": labels, "duration": d}) for at, d in jobs
    )


def test_one_job_waits_for_the_next_poll_a_launch_and_a_boot() -> None:
    """Queued at 10 s; the tick at 30 s scales up; running at 40 s, registered at 100 s."""
    r = simulate(config(), trace((10, 100)))
    assert r.p50_queue_seconds == r.p95_queue_seconds == 90.0
    assert r.end_seconds == 200.0
    assert r.runner_hours * 3600 == pytest.approx(160.0)  # billed from running to the end
    assert r.boot_hours * 3600 == pytest.approx(60.0) and r.idle_runner_hours == 0.0
    assert r.scale_actions == 1 and r.instances_launched == 1


def test_the_tick_acts_a_poll_latency_after_it_observed() -> None:
    r = simulate(config({"poll_latency": "5s"}), trace((10, 100)))
    assert r.p95_queue_seconds == 95.0


def test_reaction_decides_a_second_after_the_job_is_queued() -> None:
    r = simulate(config({"reaction": "1s", "poll_latency": "5s"}), trace((10, 100)))
    assert r.p95_queue_seconds == 71.0  # a reaction tick acts at once


def test_a_configured_webhook_reacts_after_its_debounce_and_the_delivery() -> None:
    c = load_config(
        runner_types={"cpu": {"labels": CPU, "pools": ["p1"]}},
        webhook={"secret": "s", "debounce": "0.5s"},
        simulation=EXACT,
    )
    assert simulate(c, trace((10, 100))).p95_queue_seconds == 71.5


def test_an_idle_runner_goes_after_idle_timeout_while_no_rate_is_known() -> None:
    """Idle from 200 s, first seen idle at the 210 s tick, scaled in at 330 s (2 min): the
    controller has not watched arrivals for a whole window yet, so idle_timeout decides."""
    r = simulate(config(), trace((10, 100), (1000, 10)))
    assert r.instances_launched == 2
    assert r.idle_runner_hours * 3600 == pytest.approx(130.0)
    assert r.runner_hours * 3600 == pytest.approx((330 - 40) + (1100 - 1030))


def test_once_arrivals_were_watched_an_idle_runner_no_job_will_take_goes_at_once() -> None:
    """After the 15-minute window the rate is known (none here): the runner idle from
    1,100 s is scaled in by the 1,110 s tick that first sees it, not 2 minutes later."""
    r = simulate(config(), trace((1000, 10), (1500, 10)))
    assert r.instances_launched == 2
    assert r.idle_runner_hours * 3600 == pytest.approx(10.0)


def test_a_job_arriving_while_a_runner_is_idle_starts_at_once() -> None:
    r = simulate(config(), trace((10, 100), (250, 10)))
    assert r.instances_launched == 1
    # waits 90 s and 0 s: interpolated percentiles
    assert r.p50_queue_seconds == 45.0 and r.p95_queue_seconds == pytest.approx(85.5)


def test_a_pool_out_of_capacity_fails_over_one_tick_later() -> None:
    """AWS accepts the scale-up of p1 at 30 s and reports a Failed activity; the 60 s tick
    sees it, releases p1 and scales p2 up: the job waits one more tick."""
    outage = {"outages": [{"pool": "p1", "from": "0s", "to": "1h"}]}
    r = simulate(config(outage), trace((10, 100)))
    assert r.p95_queue_seconds == 120.0
    assert r.scale_actions == 3  # p1 up, p1 released, p2 up
    assert r.runner_hours * 3600 == pytest.approx(230 - 70)


def test_jobs_no_pool_serves_are_counted_apart() -> None:
    r = simulate(config(), parse_trace(['{"created_at": 5, "labels": ["gpu"], "duration": 9}']))
    assert r.jobs == 0 and r.unserved == 1 and r.p95_queue_seconds == 0.0


def test_github_gives_the_oldest_queued_job_to_a_free_runner_one_at_a_time() -> None:
    em = Emulator(config(), trace((0, 10), (5, 10), (6, 10)))
    em.set_desired(em.pools["p1"], 1)  # one runner, registered at 70 s
    em.run()
    assert [(j.started, j.finished) for j in em.jobs] == [(70, 80), (80, 90), (90, 100)]


def test_an_ephemeral_runner_terminates_with_its_job() -> None:
    em = Emulator(config(), trace((0, 10)))
    em.ephemeral = True
    em.set_desired(em.pools["p1"], 1)
    em.run()
    (inst,) = em.instances
    assert inst.terminated == 80.0 and em.pools["p1"].desired == 0


def test_a_group_in_an_outage_launches_what_it_lacks_once_the_outage_ends() -> None:
    em = Emulator(config({"outages": [{"pool": "p1", "from": "0s", "to": "100s"}]}), trace((0, 10)))
    em.set_desired(em.pools["p1"], 1)
    assert em.instances == [] and len(em.pools["p1"].failed) == 1
    state = em.pool_states()["p1"]
    assert state.desired_capacity == 1 and state.live_instances == 0 and state.activities
    em.run()
    assert [i.launched for i in em.instances] == [100.0]


@pytest.mark.parametrize(
    ("launches", "started"),
    [
        ({"per_activity": 2, "retry": "10s"}, [0, 0, 10, 10, 20]),
        ({"bucket": 3, "refill": 0.1, "retry": "10s"}, [0, 0, 0, 10, 20]),
        ({}, [0, 0, 0, 0, 0]),
    ],
    ids=["two-per-activity", "token-bucket-of-three-refilled-slowly", "defaults-take-five-at-once"],
)
def test_a_large_raise_launches_as_fast_as_the_throttles_allow(
    launches: dict[str, Any], started: list[float]
) -> None:
    em = Emulator(config({"launches": launches}), trace((0, 1)))
    em.set_desired(em.pools["p1"], 5)
    em.start()
    em.clock.run(until=lambda: len(em.instances) >= 5, limit=100)
    assert [i.launched for i in em.instances] == started


def test_billing_starts_at_running_with_a_minimum() -> None:
    em = Emulator(config({"billing_minimum": "60s"}), trace((0, 1)))
    em.set_desired(em.pools["p1"], 2)
    first, second = em.instances
    em.clock.at(5.0, em.terminate, first)  # still pending: never ran, never billed
    em.clock.at(30.0, em.terminate, second)  # ran 20 s: billed the minute
    em.clock.run(until=lambda: second.terminated is not None, limit=100)
    assert first.billed(100, 60) == 0.0 and second.billed(100, 60) == 60.0


def test_terminating_a_busy_runner_is_a_bug_the_emulator_refuses() -> None:
    em = Emulator(config(), trace((0, 500)))
    em.set_desired(em.pools["p1"], 1)
    em.start()
    em.clock.run(until=lambda: em.jobs[0].started is not None, limit=100)
    with pytest.raises(RuntimeError, match="busy"):
        em.terminate(em.instances[0])


def test_boot_times_follow_the_fitted_lognormal_and_repeat_per_pool() -> None:
    c = config({"boot_time": {"p50": "90s", "p95": "240s"}, "seed": 3, "boot_correlation": 0})
    first = Emulator(c, trace((0, 1))).pools["p1"]
    samples = [first.cold_start()[1] for _ in range(20000)]
    assert statistics.median(samples) == pytest.approx(90, rel=0.03)
    assert percentile(samples, 95) == pytest.approx(240, rel=0.05)
    again = Emulator(c, trace((0, 1))).pools["p1"]
    assert [again.cold_start()[1] for _ in range(5)] == samples[:5]
    mu, sigma = lognormal(BootTime(p50=90, p95=90))
    assert sigma == 0.0 and mu == pytest.approx(4.49980967)


@pytest.mark.parametrize(
    ("correlation", "same"), [(1.0, True), (0.0, False)], ids=["fully-shared", "independent"]
)
def test_boots_launched_together_share_their_factor(correlation: float, same: bool) -> None:
    c = config({"boot_time": {"p50": "90s", "p95": "240s"}, "boot_correlation": correlation})
    pool = Emulator(c, trace((0, 1))).pools["p1"]
    boots = {round(pool.cold_start()[1], 6) for _ in range(3)}
    assert (len(boots) == 1) is same
    other = Emulator(c, trace((0, 1))).pools["p1"]  # another policy, the same moment
    assert other.boot_factor(0.0) == pool.boot_factor(0.0)


def test_every_policy_replays_the_same_jobs_to_completion() -> None:
    from autoscaler.sim.simulate import POLICIES  # noqa: PLC0415

    jobs = [(t * 37.0 % 3000, 60 + t % 7 * 30) for t in range(60)]
    busy = sum(d for _, d in jobs) / 3600
    for name in POLICIES:
        for equal in (False, True):
            r = simulate(config(max=20), trace(*jobs), name, equal_knobs=equal)
            assert r.jobs == 60 and r.unfinished == 0, name
            assert r.runner_hours >= busy, name
