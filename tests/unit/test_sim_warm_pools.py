"""Warm pools in the emulator, on a trace small enough to reckon by hand.

Times are fixed (p50 == p95) and billing has no minimum, so every number is exact: a
cold instance asked for at ``t`` runs at ``t + 10`` and registers at ``t + 110``; a warm
one registers at ``t + 20``, billed from ``t``; the warm pool refills at cold speed (a
warm instance launched at ``t`` is stopped, ready, at ``t + 110``, its 100 s of
initialisation billed as compute).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoscaler.config import Config
from autoscaler.domain import WarmPoolSpec
from autoscaler.sim.emulator import Emulator
from autoscaler.sim.metrics import format_table, summarize
from autoscaler.sim.simulate import simulate
from autoscaler.sim.trace import Trace, parse_trace
from tests.factories import load_config

CPU = ["self-hosted", "cpu"]
EXACT = {
    "boot_time": {"p50": "100s", "p95": "100s"},
    "launch_time": {"p50": "10s", "p95": "10s"},
    "warm_start": {"p50": "20s", "p95": "20s"},
    "poll_latency": "0s",
    "billing_minimum": "0s",
}
TWO_STOPPED = WarmPoolSpec("stopped", 2, 2, reuse=False)


def config(**extra: Any) -> Config:
    return load_config(
        poll_interval="30s",
        runner_types={"cpu": {"labels": CPU, "pools": ["p1"], "idle_timeout": "2m"}},
        simulation=EXACT,
        **extra,
    )


def trace(*jobs: tuple[float, float]) -> Trace:
    return parse_trace(
        json.dumps({"created_at": at, "labels": CPU, "duration": d}) for at, d in jobs
    )


def scripted(jobs: Trace, *steps: tuple[float, int]) -> tuple[Emulator, float]:
    """The emulator with a warm pool of two put at 0 and the desired capacity set at the
    given times (no policy), run to the end."""
    em = Emulator(config(), jobs)
    pool = em.pools["p1"]
    em.clock.at(0.0, em.set_warm_pool, pool, TWO_STOPPED)
    for at, desired in steps:
        em.clock.at(at, em.set_desired, pool, desired)
    return em, em.run()


def test_a_scale_out_starts_stopped_instances_first_and_launches_the_rest_cold() -> None:
    """Stopped at 110 s. At 200 s the group wants 3: two warm starts (runners at 220 s),
    one cold launch (runner at 310 s). The three jobs queued at 200 s wait 20, 20, 110 s."""
    em, _ = scripted(trace((200, 300), (200, 300), (200, 300)), (200.0, 3))
    waits = sorted(j.started - j.created for j in em.jobs if j.started is not None)
    assert waits == [20.0, 20.0, 110.0]
    warm = [i for i in em.instances if i.warm_started]
    assert [(i.running, i.ready) for i in warm] == [(200.0, 220.0), (200.0, 220.0)]
    cold = [i for i in em.instances if not i.warm_started]
    assert [(i.running, i.ready) for i in cold] == [(210.0, 310.0)]


def test_the_warm_pool_refills_at_cold_speed() -> None:
    """The two taken at 200 s are replaced by launches then: stopped again at 310 s."""
    em, end = scripted(trace((200, 300)), (200.0, 1))
    pool = em.pools["p1"]
    assert len(em.warm_launched) == 3
    assert [i.stopped_at for i in pool.stopped] == [110.0, 310.0]
    assert end == 520.0


def test_stopped_instances_are_billed_for_storage_only() -> None:
    """One job at 200 s for 300 s, the replay ends at 520 s. Compute: the warm start's
    run (200-520 s), every warm instance's 100 s of initialisation (three). Storage: the
    started one 110-200 s, the other 110-520 s, the refill 310-520 s."""
    em, end = scripted(trace((200, 300)), (200.0, 1))
    r = summarize("warm", em, end)
    assert r.runner_hours * 3600 == pytest.approx(320.0 + 3 * 100.0)
    assert r.storage_hours * 3600 == pytest.approx(90.0 + 410.0 + 210.0)
    assert r.boot_hours * 3600 == pytest.approx(3 * 100.0 + 20.0)
    assert r.warm_starts == 1 and r.instances_launched == 1
    assert r.as_json()["storage_hours"] == round(r.storage_hours, 2)
    assert "storage-h" in format_table([r]).splitlines()[0]


def test_a_deleted_warm_pool_terminates_its_stopped_instances() -> None:
    """Deleted at 300 s: both stopped instances go (stored 110-300 s each); the scale-out
    at 350 s is a cold launch (runner at 460 s)."""
    em = Emulator(config(), trace((400, 10)))
    pool = em.pools["p1"]
    em.clock.at(0.0, em.set_warm_pool, pool, TWO_STOPPED)
    em.clock.at(300.0, em.set_warm_pool, pool, None)
    em.clock.at(350.0, em.set_desired, pool, 1)
    end = em.run()
    assert pool.stopped == [] and [i.terminated for i in em.warm_launched] == [300.0, 300.0]
    assert em.jobs[0].started == 460.0
    assert summarize("x", em, end).storage_hours * 3600 == pytest.approx(2 * 190.0)


@pytest.mark.parametrize(
    ("policy", "warm_starts"),
    [
        pytest.param("ci-autoscaler", True, id="this-project-puts-its-warm-pool"),
        pytest.param("jobs-per-agent", False, id="a-peer-stays-cold"),
    ],
)
def test_only_this_projects_driver_puts_the_warm_pools(policy: str, warm_starts: bool) -> None:
    sized = config(pools={"p1": {"warm_pool": {"min_size": 2, "max_prepared": 2}}})
    r = simulate(sized, trace((400, 60), (800, 60)), policy)
    assert (r.warm_starts > 0) is warm_starts
    assert (r.storage_hours > 0) is warm_starts


def test_reuse_on_scale_in_puts_the_instance_back_stopped() -> None:
    """``max_prepared: 2``: two stopped at 110 s. One starts at 200 s (runner at 220 s,
    a job until 250 s); scaled in at 400 s, it goes back stopped: no third launch, its
    compute is its initialisation and its run, and it is stored again from 400 s."""
    em = Emulator(config(), trace((200, 50)))
    pool = em.pools["p1"]
    em.clock.at(0.0, em.set_warm_pool, pool, WarmPoolSpec("stopped", 0, 2, reuse=True))
    em.clock.at(200.0, em.set_desired, pool, 1)
    em.clock.at(400.0, lambda: em.terminate(em.instances[0]))
    em.clock.at(500.0, lambda: None)
    em.run()
    em.clock.run(until=lambda: em.now >= 500.0, limit=500.0)
    [reused] = em.instances
    assert len(em.warm_launched) == 2 and reused.terminated is None
    assert reused in pool.stopped and reused.stopped_at == 400.0
    assert reused.billed(500.0, 0.0) == pytest.approx(100.0 + 200.0)
    assert reused.stored_until(500.0) == pytest.approx(90.0 + 100.0)
