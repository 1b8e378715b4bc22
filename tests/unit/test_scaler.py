"""The scaler over hand-written fakes of RunnerPool and JobSource."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, Config, RetryConfig
from autoscaler.errors import (
    AuthenticationError,
    CapacityError,
    PermanentError,
    TransientError,
)
from autoscaler.scale.plan import Decision
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import (
    GPU,
    T0,
    FakePool,
    FakeSource,
    config,
    iid,
    inst,
    observation,
    pool,
    rtype,
    runner,
    snapshot,
)

CFG = config(rtype(pools=("gpu-spot", "gpu-od")))


def make(fake: FakePool, source: FakeSource | None = None, cfg: Config = CFG) -> Scaler:
    cfg = cfg.model_copy(update={"aws": AwsConfig(retry=RetryConfig(max_attempts=3))})
    source = source or FakeSource()
    return Scaler(
        fake,
        source,
        cfg,
        Metrics(CollectorRegistry()),
        sleep=lambda _: None,
        rng=random.Random(0),
        **handover_ports(source),
    )


def step(
    s: Scaler, queued: int = 0, now: datetime = T0, *, fresh: bool = True, dry: bool = False
) -> dict[str, Decision]:
    runners = tuple(getattr(s.source, "runners", {}).values())
    ds = s.step(
        snapshot({GPU: queued}, at=now),
        observation(runners, now),
        now,
        observation_fresh=fresh,
        dry_run=dry,
    )
    return {d.pool: d for d in ds}


def metric(s: Scaler, name: str, **labels: str) -> float:
    return s.metrics.registry.get_sample_value(name, labels) or 0.0


def empty() -> FakePool:
    return FakePool({"gpu-spot": pool("gpu-spot", max_size=3), "gpu-od": pool("gpu-od")})


def test_scale_up_sets_desired_and_records_metrics() -> None:
    fake = empty()
    s = make(fake)
    ds = step(s, queued=2)
    assert (ds["gpu-spot"].action, ds["gpu-spot"].current, ds["gpu-spot"].desired) == (
        "scale_up",
        0,
        2,
    )
    assert ("set_desired_capacity", "gpu-spot", 2) in fake.calls
    assert (
        metric(
            s,
            "ci_autoscaler_scale_actions_total",
            runner_type=GPU,
            pool="gpu-spot",
            action="scale_up",
        )
        == 1
    )
    assert metric(s, "ci_autoscaler_pool_desired_capacity", runner_type=GPU, pool="gpu-spot") == 2


def test_capacity_error_fails_over_to_next_pool_and_backs_off() -> None:
    fake = empty()
    fake.fail(
        "set_desired_capacity", "gpu-spot", CapacityError("no", code="InsufficientInstanceCapacity")
    )
    s = make(fake)
    ds = step(s, queued=2)
    assert (ds["gpu-spot"].desired, ds["gpu-od"].desired) == (0, 2)
    assert "InsufficientInstanceCapacity: backed off 300s, failing over" in ds["gpu-spot"].reason
    assert "after failover" in ds["gpu-od"].reason
    assert s.state.in_backoff("gpu-spot", T0 + timedelta(seconds=299))
    assert metric(s, "ci_autoscaler_pool_failovers_total", runner_type=GPU, pool="gpu-spot") == 1
    assert (
        metric(
            s,
            "ci_autoscaler_provisioning_failures_total",
            runner_type=GPU,
            pool="gpu-spot",
            reason="capacity",
        )
        == 1
    )
    assert s.last_problems == []


def test_transient_error_is_retried_then_succeeds() -> None:
    fake = empty()
    fake.fail("set_desired_capacity", "gpu-spot", TransientError("slow", code="Throttling"))
    s = make(fake)
    assert step(s, queued=1)["gpu-spot"].desired == 1
    assert [c for c in fake.calls if c[0] == "set_desired_capacity"] == [
        ("set_desired_capacity", "gpu-spot", 1)
    ] * 2
    assert (
        metric(s, "ci_autoscaler_cloud_retries_total", pool="gpu-spot", error_class="transient")
        == 1
    )


def test_permanent_error_is_a_problem_with_its_code() -> None:
    fake = empty()
    fake.fail("set_desired_capacity", "gpu-spot", AuthenticationError("no", code="AccessDenied"))
    s = make(fake)
    ds = step(s, queued=1)
    assert ds["gpu-spot"].desired == 0 and ds["gpu-od"].desired == 0
    assert [(p.kind, p.pool, p.code) for p in s.last_problems] == [
        ("permanent", "gpu-spot", "AccessDenied")
    ]
    assert metric(s, "ci_autoscaler_cloud_failures_total", pool="gpu-spot", error_class="auth") == 1


def idle_world() -> tuple[FakePool, FakeSource]:
    fake = FakePool(
        {
            "gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot"), inst(2, "gpu-spot")]),
            "gpu-od": pool("gpu-od"),
        }
    )
    source = FakeSource({1: runner(1, "gpu-spot"), 2: runner(2, "gpu-spot")})
    return fake, source


class CheckingPool(FakePool):
    """Terminates only instances whose runner is already deregistered."""

    source: FakeSource

    def terminate_instance(self, pool: str, instance_id: str) -> None:
        assert all(not r.name.endswith(instance_id) for r in self.source.runners.values())
        super().terminate_instance(pool, instance_id)


def test_scale_in_deregisters_first_then_terminates() -> None:
    base, source = idle_world()
    fake = CheckingPool(base.pools)
    fake.source = source
    s = make(fake, source)
    step(s)  # first seen idle: the idle clock starts
    ds = step(s, now=T0 + timedelta(seconds=601))
    assert source.removed == [1, 2]
    assert [c[2] for c in fake.calls if c[0] == "terminate_instance"] == [iid(1), iid(2)]
    assert (ds["gpu-spot"].action, ds["gpu-spot"].current, ds["gpu-spot"].desired) == (
        "scale_in",
        2,
        0,
    )


def test_runner_that_turned_busy_is_left_alone() -> None:
    """The poll saw both runners idle past idle_timeout; by the time the scaler removes
    them, runner 1 has taken a job. GitHub refuses to delete a busy runner (422, which the
    fake source plays from the runner's own state) and its instance stays."""
    fake, source = idle_world()
    s = make(fake, source)
    step(s)
    later = T0 + timedelta(seconds=601)
    polled = observation(tuple(source.runners.values()), later)  # both idle at poll time
    source.runners[1] = replace(source.runners[1], busy=True)  # then runner 1 takes a job
    ds = {
        d.pool: d
        for d in s.step(snapshot({GPU: 0}, at=later), polled, later, observation_fresh=True)
    }
    assert [c[2] for c in fake.calls if c[0] == "terminate_instance"] == [iid(2)]
    assert source.removed == [2] and 1 in source.runners
    assert ds["gpu-spot"].desired == 1
    assert f"runner gpu-spot-{iid(1)} kept" in ds["gpu-spot"].reason
    assert s.last_problems == []


def test_runner_github_no_longer_knows_is_gone_and_its_instance_an_orphan_candidate() -> None:
    """Decided: a runner GitHub answers 404 for on delete no
    longer exists, so there is nothing to deregister and nothing to page about; it is not
    proof that nothing runs on the instance (a runner can re-register under a new id).
    The instance becomes an orphan candidate: the orphan sweep terminates it on a later
    tick, after asking GitHub by name that no runner is registered for it."""
    fake, source = idle_world()
    s = make(fake, source)
    step(s)
    later = T0 + timedelta(seconds=601)
    polled = observation(tuple(source.runners.values()), later)
    del source.runners[1]  # removed at GitHub by someone else: the DELETE will 404
    ds = {
        d.pool: d
        for d in s.step(snapshot({GPU: 0}, at=later), polled, later, observation_fresh=True)
    }
    assert [c[2] for c in fake.calls if c[0] == "terminate_instance"] == [iid(2)]
    assert s.last_problems == []  # gone is not a failure: no page
    assert "already gone: instance left to orphan sweep" in ds["gpu-spot"].reason

    after = later + timedelta(seconds=30)  # the next poll: runner 1 is not listed
    ds = step(s, now=after)
    assert [c[2] for c in fake.calls if c[0] == "terminate_instance"] == [iid(2), iid(1)]
    assert source.lookups == [f"gpu-spot-{iid(1)}"]
    assert ds["gpu-spot"].action == "terminate_orphan"


def test_failed_terminate_after_deregister_is_reported_not_counted() -> None:
    fake, source = idle_world()
    s = make(fake, source)
    step(s)
    fake.fail("terminate_instance", "gpu-spot", PermanentError("no", code="ValidationError"))
    ds = step(s, now=T0 + timedelta(seconds=601))
    assert ds["gpu-spot"].desired == 1  # one of two went
    assert [p.code for p in s.last_problems] == ["ValidationError"]


def test_orphans_terminated_and_stale_runners_deregistered() -> None:
    fake = FakePool(
        {"gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot", age=1000)]), "gpu-od": pool("gpu-od")}
    )
    source = FakeSource({9: runner(9, "gpu-od", online=False)})
    s = make(fake, source)
    ds = step(s, queued=1)
    assert ("terminate_instance", "gpu-spot", iid(1)) in fake.calls
    assert source.removed == [9]
    assert ds["gpu-spot"].action == "terminate_orphan" and ds["gpu-od"].action == "deregister_stale"
    assert (
        metric(
            s,
            "ci_autoscaler_provisioning_failures_total",
            runner_type=GPU,
            pool="gpu-spot",
            reason="boot_timeout",
        )
        == 1
    )


def test_dry_run_changes_nothing() -> None:
    fake, source = idle_world()
    s = make(fake, source)
    step(s)
    ds = step(s, queued=5, now=T0 + timedelta(seconds=601), dry=True)
    assert [c[0] for c in fake.calls] == ["describe", "describe"]
    assert source.removed == []
    assert ds["gpu-spot"].action == "scale_up" and ds["gpu-spot"].desired == 5


def test_stale_observation_holds_every_pool() -> None:
    fake, source = idle_world()
    s = make(fake, source)
    ds = step(s, queued=5, fresh=False)
    assert {d.action for d in ds.values()} == {"hold"}
    assert [c[0] for c in fake.calls] == ["describe"]


def test_describe_failure_holds_and_permanent_one_is_a_problem() -> None:
    fake = empty()
    fake.fail("describe", "*", TransientError("x"), TransientError("x"), TransientError("x"))
    s = make(fake)
    ds = step(s, queued=3)
    assert {d.action for d in ds.values()} == {"hold"} and s.last_problems == []
    fake.fail("describe", "*", AuthenticationError("no", code="AccessDenied"))
    step(s, queued=3)
    assert [p.code for p in s.last_problems] == ["AccessDenied"]


def test_missing_pool_is_a_problem() -> None:
    fake = FakePool({"gpu-spot": pool("gpu-spot")})
    s = make(fake)
    ds = step(s, queued=1)
    assert ds["gpu-od"].action == "missing"
    assert [(p.kind, p.pool) for p in s.last_problems] == [("missing", "gpu-od")]


def test_every_pool_out_of_capacity_is_a_problem() -> None:
    fake = empty()
    for p in ("gpu-spot", "gpu-od"):
        fake.fail(
            "set_desired_capacity", p, CapacityError("no", code="InsufficientInstanceCapacity")
        )
    s = make(fake)
    step(s, queued=1)
    assert [p.kind for p in s.last_problems] == ["out_of_capacity"]
    step(s, queued=1, now=T0 + timedelta(seconds=10))  # both backed off: still a problem
    assert [p.kind for p in s.last_problems] == ["out_of_capacity"]


def test_a_skipped_malformed_runner_never_makes_its_busy_instance_an_orphan() -> None:
    """Regression: GitHub returned one runner item the source could not parse. That runner
    (busy, on an instance long past boot_timeout) was absent from the observation, so its
    instance looked unregistered and the orphan cleanup would have terminated it mid-job.
    An observation with skipped runners now plans no orphan termination."""
    fake = FakePool(
        {"gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot", age=1000)]), "gpu-od": pool("gpu-od")}
    )
    s = make(fake, FakeSource())
    partial = replace(observation((), T0), skipped_items=1, skipped_runners=1)
    decisions = s.step(snapshot({GPU: 0}, at=T0), partial, T0, observation_fresh=True)
    assert [c for c in fake.calls if c[0] == "terminate_instance"] == []
    assert all(d.action != "terminate_orphan" for d in decisions)

    complete = replace(partial, skipped_items=0, skipped_runners=0)
    s.step(snapshot({GPU: 0}, at=T0), complete, T0, observation_fresh=True)
    assert ("terminate_instance", "gpu-spot", iid(1)) in fake.calls, "a true orphan still goes"


def pending_gauge(s: Scaler) -> float:
    return metric(s, "ci_autoscaler_pending_terminations", runner_type=GPU, pool="gpu-spot")


def test_throttled_terminate_after_deregistration_is_retried_first_next_tick() -> None:
    """Regression: the runner was deregistered, then AWS throttled the
    termination past every retry. The instance, with no runner left to give it work, ran
    on until the orphan sweep found it (boot_timeout later, here a day, and counted as a
    provisioning failure). The scaler now remembers the termination, counts it, and
    retries it before anything else on the next tick."""
    base, source = idle_world()
    fake = FakePool(base.pools)
    cfg = config(rtype(pools=("gpu-spot", "gpu-od"), boot_timeout=86400))
    s = make(fake, source, cfg)
    step(s)
    throttled = [TransientError("slow down", code="Throttling") for _ in range(6)]
    fake.fail("terminate_instance", "gpu-spot", *throttled)  # 3 attempts x 2 runners
    later = T0 + timedelta(seconds=601)
    ds = step(s, now=later)
    assert source.removed == [1, 2]  # both deregistered...
    assert len(fake.pools["gpu-spot"].instances) == 2  # ...neither instance terminated
    assert set(s.state.pending_terminations) == {iid(1), iid(2)}
    deferred = "ci_autoscaler_deferred_terminations_total"
    assert metric(s, deferred, runner_type=GPU, pool="gpu-spot") == 2
    assert pending_gauge(s) == 2
    assert "retried first next tick" in ds["gpu-spot"].reason

    fake.calls.clear()
    ds = step(s, now=later + timedelta(seconds=30))
    assert [c[:2] for c in fake.calls[:3]] == [
        ("describe", ""),
        ("terminate_instance", "gpu-spot"),
        ("terminate_instance", "gpu-spot"),
    ]
    assert len(fake.pools["gpu-spot"].instances) == 0
    assert s.state.pending_terminations == {} and pending_gauge(s) == 0
    assert ds["gpu-spot"].action == "scale_in" and ds["gpu-spot"].desired == 0
    scale_ins = metric(
        s, "ci_autoscaler_scale_actions_total", runner_type=GPU, pool="gpu-spot", action="scale_in"
    )
    assert scale_ins == 2
    orphaned = metric(
        s,
        "ci_autoscaler_provisioning_failures_total",
        runner_type=GPU,
        pool="gpu-spot",
        reason="boot_timeout",
    )
    assert orphaned == 0  # a scale-in finished, not an instance that failed to boot
