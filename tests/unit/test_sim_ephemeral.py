"""``ci-autoscaler simulate`` compares this project's policy in ephemeral and persistent mode
on the same trace: a machine per job (no idle hours, a boot per job) against machines that
run job after job."""

from __future__ import annotations

from autoscaler.sim.simulate import POLICIES, PROJECT, PROJECT_EPHEMERAL, as_ephemeral, simulate
from tests.unit.test_sim_emulator import config, trace


def test_ephemeral_mode_is_a_policy_of_its_own() -> None:
    assert PROJECT_EPHEMERAL in POLICIES
    assert all(rt.ephemeral for rt in as_ephemeral(config()).runner_types)
    assert not any(rt.ephemeral for rt in config().runner_types)


def test_on_the_same_trace_ephemeral_launches_a_machine_per_job_and_idles_never() -> None:
    jobs = [(t * 120.0, 300.0) for t in range(20)]  # one job every 2 min, 5 min each
    persistent = simulate(config(), trace(*jobs), PROJECT)
    ephemeral = simulate(config(), trace(*jobs), PROJECT_EPHEMERAL)
    assert persistent.jobs == ephemeral.jobs == 20
    assert ephemeral.unfinished == persistent.unfinished == 0
    assert ephemeral.instances_launched == 20  # one clean machine per job
    assert persistent.instances_launched < 20  # machines reused
    assert ephemeral.idle_runner_hours == 0.0
    assert ephemeral.p95_queue_seconds >= persistent.p95_queue_seconds  # a boot per job
