"""The handover through the scaler, over hand-written fakes of GitHub's runner
registration, SSM and the ledger store. Ephemeral pools: one config per instance (across
ticks and restarts), spent machines terminated at once, faults retried or cleaned up.
Persistent pools: one registration token per instance, in its own parameter, and an orphan
terminated only once no token it may hold can still register a runner."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, Config, RetryConfig
from autoscaler.domain import InstanceLifecycle, Runner
from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    RateLimitedError,
    RejectedError,
    TransientError,
)
from autoscaler.scale.handover import HandoverRecord
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import FakeLedgerStore, FakeParameters, FakeRegistrar
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
    snapshot,
)

POOL = "gpu-spot"
PATH = "/ci-autoscaler/jit"


def eph_config(min_idle: int = 0) -> Config:
    rt = rtype(pools=(POOL,), min_idle=min_idle).model_copy(
        update={"mode": "ephemeral", "runner_group_id": 4}
    )
    return config(rt).model_copy(update={"aws": AwsConfig(retry=RetryConfig(max_attempts=3))})


@dataclass
class World:
    cfg: Config = field(default_factory=eph_config)
    pool: FakePool = field(default_factory=lambda: FakePool({POOL: pool(POOL, [])}))
    source: FakeSource = field(default_factory=FakeSource)
    params: FakeParameters = field(default_factory=FakeParameters)
    store: FakeLedgerStore = field(default_factory=FakeLedgerStore)
    metrics: Metrics = field(default_factory=lambda: Metrics(CollectorRegistry()))
    registrar: FakeRegistrar = field(init=False)
    scaler: Scaler = field(init=False)

    def __post_init__(self) -> None:
        self.registrar = FakeRegistrar(self.source)
        self.restart()

    def restart(self) -> None:
        """A new process on the same state store (or a new leader)."""
        self.scaler = Scaler(
            self.pool,
            self.source,
            self.cfg,
            self.metrics,
            sleep=lambda _: None,
            rng=random.Random(0),
            registrar=self.registrar,
            parameters=self.params,
            handover_store=self.store,
        )

    def tick(self, now: datetime, queued: int = 0) -> None:
        self.pool.now = now
        runners = tuple(self.source.runners.values())
        self.scaler.step(
            snapshot({GPU: queued}, at=now), observation(runners, now), now, observation_fresh=True
        )
        self.check_invariants()

    def add_instance(self, n: int, now: datetime = T0) -> None:
        p = self.pool.pools[POOL]
        self.pool.pools[POOL] = replace(
            p,
            instances=(*p.instances, inst(n, POOL, age=5, now=now)),
            desired_capacity=p.desired_capacity + 1,
        )

    def runner_of(self, n: int) -> Runner | None:
        return next((r for r in self.source.runners.values() if r.name == f"{POOL}-{iid(n)}"), None)

    def live_ids(self) -> set[str]:
        return {
            i.id
            for i in self.pool.pools[POOL].instances
            if i.lifecycle in (InstanceLifecycle.PENDING, InstanceLifecycle.IN_SERVICE)
        }

    def check_invariants(self) -> None:
        """No machine with two runners; every parameter belongs to a recorded instance."""
        names = [r.name for r in self.source.runners.values()]
        assert len(names) == len(set(names)), names

    def jit(self, result: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "ci_autoscaler_jit_configs_total", {"runner_type": GPU, "result": result}
        )
        return value or 0.0

    def spent(self) -> float:
        value = self.metrics.registry.get_sample_value(
            "ci_autoscaler_spent_instances_terminated_total", {"pool": POOL}
        )
        return value or 0.0


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_new_instance_gets_exactly_one_config_across_ticks_and_restarts() -> None:
    w = World()
    w.add_instance(1)
    w.tick(T0)
    name = f"{PATH}/{POOL}/{iid(1)}"
    assert w.registrar.asked == [
        (f"{POOL}-{iid(1)}", tuple(sorted({"self-hosted", GPU})), 4, "_work")
    ]
    value, tag = w.params.values[name]
    runner = w.runner_of(1)
    assert runner is not None and value == f"jit-{runner.id}" and tag == iid(1)
    assert HandoverRecord.from_json(iid(1), w.store.records[iid(1)]).runner_id == runner.id
    w.tick(later(30))
    w.restart()
    w.tick(later(60))
    assert len(w.registrar.asked) == 1
    assert w.jit("created") == 1


def test_the_parameter_is_deleted_once_the_runner_is_online() -> None:
    w = World()
    w.add_instance(1)
    w.tick(T0)
    runner = w.runner_of(1)
    assert runner is not None
    w.source.runners[runner.id] = replace(runner, online=True)
    w.tick(later(30))
    assert w.params.values == {}
    assert HandoverRecord.from_json(iid(1), w.store.records[iid(1)]).online_at == later(30)


def test_a_spent_runner_s_instance_is_terminated_in_the_same_tick_and_not_replaced() -> None:
    """GitHub removed the runner after its job: the instance goes now (desired capacity
    decremented), not after idle_timeout, and no scale-up brings it back."""
    w = World()
    w.add_instance(1)
    w.tick(T0)
    runner = w.runner_of(1)
    assert runner is not None
    w.source.runners[runner.id] = replace(runner, online=True, busy=True)
    w.tick(later(30))
    del w.source.runners[runner.id]  # its one job done, GitHub removes an ephemeral runner
    w.tick(later(60))
    assert ("terminate_instance", POOL, iid(1)) in w.pool.calls
    assert w.pool.pools[POOL].desired_capacity == 0
    assert not any(c[0] == "set_desired_capacity" for c in w.pool.calls)
    assert w.spent() == 1
    assert iid(1) not in w.store.records
    assert w.params.values == {}


def test_min_idle_replaces_a_warm_runner_that_took_a_job() -> None:
    w = World(cfg=eph_config(min_idle=1))
    w.add_instance(1)
    w.tick(T0)
    runner = w.runner_of(1)
    assert runner is not None
    del w.source.runners[runner.id]  # it took a job and finished
    w.tick(later(60))
    assert w.spent() == 1
    assert ("set_desired_capacity", POOL, 1) in w.pool.calls
    assert len(w.live_ids()) == 1 and iid(1) not in w.live_ids()


def test_a_runner_never_online_is_deleted_and_its_instance_terminated() -> None:
    w = World()
    w.add_instance(1)
    w.tick(T0)
    w.tick(later(901))
    assert w.runner_of(1) is None
    assert ("terminate_instance", POOL, iid(1)) in w.pool.calls
    assert w.params.values == {} and w.store.records == {}
    assert (
        w.metrics.registry.get_sample_value(
            "ci_autoscaler_provisioning_failures_total",
            {"runner_type": GPU, "pool": POOL, "reason": "jit_never_online"},
        )
        == 1
    )


def test_a_stop_between_github_and_the_ledger_recovers_with_one_runner() -> None:
    """The process stopped after GitHub created the runner and before it saved the answer:
    the saved intent makes the next process resolve GitHub's 409 (delete the offline
    runner, ask again) instead of leaving a second, unused runner."""
    w = World()
    w.add_instance(1)
    w.store.records[iid(1)] = HandoverRecord(iid(1), POOL, GPU, asked_at=T0).to_json()
    w.registrar.generate_jit_config(f"{POOL}-{iid(1)}", ["gpu"], 1, "_work")  # before the stop
    w.tick(later(30))
    runner = w.runner_of(1)
    assert runner is not None
    assert w.jit("conflict") == 1 and w.jit("created") == 1
    assert w.params.values[f"{PATH}/{POOL}/{iid(1)}"][0] == f"jit-{runner.id}"


def test_a_taken_name_whose_runner_is_online_is_adopted() -> None:
    w = World()
    w.add_instance(1)
    w.store.records[iid(1)] = HandoverRecord(iid(1), POOL, GPU, asked_at=T0).to_json()
    w.registrar.generate_jit_config(f"{POOL}-{iid(1)}", ["gpu"], 1, "_work")
    runner = w.runner_of(1)
    assert runner is not None
    w.source.runners[runner.id] = replace(runner, online=True)
    w.tick(later(30))
    assert w.runner_of(1) == replace(runner, online=True)
    assert w.jit("adopted") == 1 and w.jit("created") == 0


@pytest.mark.parametrize(
    ("error", "result", "kept"),
    [
        pytest.param(RejectedError("bad labels", code="422"), "rejected", False, id="422"),
        pytest.param(
            AuthenticationError("no permission", code="403"), "forbidden", False, id="403"
        ),
        pytest.param(RateLimitedError("slow down", code="429"), "rate_limited", True, id="429"),
        pytest.param(TransientError("timeout", code="error"), "failed", True, id="timeout"),
    ],
)
def test_github_refusals_are_counted_and_retried_next_tick(
    error: AutoscalerError, result: str, kept: bool
) -> None:
    """Permanent refusals page (a problem) and leave no record: GitHub created nothing. A
    transient one keeps the intent: GitHub may have created the runner; the next tick
    recovers it. Either way the next tick ends with exactly one runner."""
    w = World()
    w.add_instance(1)
    w.registrar.errors.append(error)
    w.tick(T0)
    assert w.jit(result) == 1
    assert (iid(1) in w.store.records) is kept
    problems = [p.code for p in w.scaler.last_problems]
    assert (error.code in problems) is (result in ("rejected", "forbidden"))
    w.tick(later(30))
    assert w.runner_of(1) is not None and w.jit("created") == 1


def test_ssm_throttling_is_retried_within_the_tick() -> None:
    w = World()
    w.add_instance(1)
    w.params.errors["put"] = [RateLimitedError("ThrottlingException", code="ThrottlingException")]
    w.tick(T0)
    assert f"{PATH}/{POOL}/{iid(1)}" in w.params.values
    assert w.jit("created") == 1


def test_a_handover_that_fails_deletes_the_runner_at_github() -> None:
    """A config nobody can read must not leave a registered runner behind."""
    w = World()
    w.add_instance(1)
    w.params.errors["put"] = [TransientError("down", code="ServiceUnavailable")] * 3
    w.tick(T0)
    assert w.runner_of(1) is None and w.store.records == {}
    assert w.jit("handover_failed") == 1
    w.tick(later(30))
    assert w.runner_of(1) is not None and w.jit("created") == 1


def test_an_instance_gone_between_generation_and_handover_leaves_nothing_behind() -> None:
    """A spot interruption between GitHub's answer and the parameter: the next tick sees
    the instance gone, deletes its runner and its parameter, and forgets it."""
    w = World()
    w.add_instance(1)

    def interrupted(name: str) -> None:
        p = w.pool.pools[POOL]
        w.pool.pools[POOL] = replace(p, instances=(), desired_capacity=0)

    w.registrar.after_create = interrupted
    w.tick(T0)
    w.tick(later(30))
    assert w.source.runners == {}
    assert w.params.values == {} and w.store.records == {}


def test_a_parameter_left_behind_by_a_crash_is_deleted_after_a_start() -> None:
    w = World()
    w.params.values[f"{PATH}/{POOL}/{iid(7)}"] = ("jit-old", iid(7))
    w.tick(T0)
    assert w.params.values == {}


def test_an_unreadable_ledger_registers_nothing() -> None:
    """Without the ledger the controller cannot know which configs exist: it waits."""
    w = World()
    w.store.errors.append(TransientError("locked", code="locked"))
    w.restart()
    w.add_instance(1)
    w.tick(T0)
    assert w.registrar.asked == []
    failures = w.metrics.registry.get_sample_value(
        "ci_autoscaler_state_store_errors_total",
        {"operation": "load_jit_records", "code": "locked"},
    )
    assert failures == 1
    w.tick(later(30))
    assert len(w.registrar.asked) == 1


def persistent() -> World:
    return World(cfg=eph_config().model_copy(update={"runner_types": (rtype(pools=(POOL,)),)}))


def token_of(w: World, n: int) -> str:
    value, tag = w.params.values[f"{PATH}/{POOL}/{iid(n)}"]
    assert tag == iid(n)
    return value


def claim_and_register(w: World, n: int, *, busy: bool = False) -> Runner:
    """The boot script: read the token, claim it (delete the parameter), register."""
    token = token_of(w, n)
    assert w.params.delete(f"{PATH}/{POOL}/{iid(n)}")
    assert w.registrar.now < w.registrar.tokens[token]
    rid = 900 + n
    w.source.runners[rid] = Runner(rid, f"{POOL}-{iid(n)}", frozenset(), True, busy)
    return w.source.runners[rid]


def tokens(w: World, result: str) -> float:
    value = w.metrics.registry.get_sample_value(
        "ci_autoscaler_registration_tokens_total", {"runner_type": GPU, "result": result}
    )
    return value or 0.0


def kept(w: World, reason: str) -> float:
    value = w.metrics.registry.get_sample_value(
        "ci_autoscaler_orphans_kept_total", {"runner_type": GPU, "pool": POOL, "reason": reason}
    )
    return value or 0.0


def test_a_persistent_instance_gets_its_own_token_and_github_creates_no_runner() -> None:
    w = persistent()
    w.add_instance(1)
    w.tick(T0)
    w.tick(later(30))
    assert w.registrar.asked == [] and len(w.registrar.tokens) == 1
    assert token_of(w, 1) in w.registrar.tokens
    record = HandoverRecord.from_json(iid(1), w.store.records[iid(1)])
    assert record.kind == "token" and record.expires_at == T0 + timedelta(hours=1)
    assert tokens(w, "created") == 1
    claim_and_register(w, 1)
    w.tick(later(60))
    assert HandoverRecord.from_json(iid(1), w.store.records[iid(1)]).online_at == later(60)
    assert w.params.values == {}


def test_a_token_that_cannot_be_stored_is_asked_for_again() -> None:
    w = persistent()
    w.params.errors["put"] = [AuthenticationError("denied", code="AccessDenied")]
    w.add_instance(1)
    w.tick(T0)
    assert tokens(w, "handover_failed") == 1 and w.params.values == {}
    w.tick(later(30))
    assert tokens(w, "created") == 1 and token_of(w, 1) == "REGTOKEN0002"


def orphan_candidate(w: World) -> None:
    """Instance 1 got its token at T0 and has no runner at boot_timeout (900 s)."""
    w.add_instance(1)
    w.tick(T0)


def test_an_orphan_that_never_claimed_its_token_is_terminated_at_once() -> None:
    w = persistent()
    orphan_candidate(w)
    w.tick(later(1000))
    assert ("terminate_instance", POOL, iid(1)) in w.pool.calls
    assert w.params.values == {} and iid(1) not in w.store.records


def test_an_orphan_that_claimed_its_token_is_kept_until_the_token_expires() -> None:
    """It may still register with the token it took, at any moment until the token expires
    (plus the margin for the clocks: a quarter of boot_timeout and a minute)."""
    w = persistent()
    orphan_candidate(w)
    w.params.delete(f"{PATH}/{POOL}/{iid(1)}")  # claimed; registering failed on the machine
    w.tick(later(1000))
    w.tick(later(3600 + 225 + 59))
    assert not any(c[0] == "terminate_instance" for c in w.pool.calls)
    assert kept(w, "token_live") == 2
    w.tick(later(3600 + 225 + 61))
    assert ("terminate_instance", POOL, iid(1)) in w.pool.calls


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
def test_an_orphan_whose_runner_registered_since_the_poll_is_kept(busy: bool) -> None:
    w = persistent()
    orphan_candidate(w)
    polled = observation((), later(1000))  # the poll saw no runner...
    claim_and_register(w, 1, busy=busy)  # ...which registers right after it
    w.pool.now = later(1000)
    w.scaler.step(snapshot({GPU: 0}, at=later(1000)), polled, later(1000), observation_fresh=True)
    assert not any(c[0] == "terminate_instance" for c in w.pool.calls)
    assert kept(w, "registered") == 1


def test_github_is_not_asked_while_the_intent_cannot_be_saved() -> None:
    """Asking without a saved intent could leave a runner a restart knows nothing about."""
    w = World()
    w.tick(T0)  # the ledger is loaded
    w.add_instance(1)
    w.store.errors.append(TransientError("disk full", code="full"))
    w.tick(later(30))
    assert w.registrar.asked == [] and w.jit("failed") == 1
    w.tick(later(60))
    assert len(w.registrar.asked) == 1 and w.jit("created") == 1


def test_a_process_that_did_not_act_reads_the_ledger_again_before_it_acts() -> None:
    """A dry-run tick (a follower's) leaves the ledger to whoever acts; the next acting
    tick must see what that process recorded meanwhile, or it would register a second
    runner for an instance the other already gave one."""
    w = World()
    w.add_instance(1)
    w.tick(T0)
    runners = tuple(w.source.runners.values())
    w.scaler.step(
        snapshot({GPU: 0}, at=later(30)),
        observation(runners, later(30)),
        later(30),
        observation_fresh=True,
        dry_run=True,
    )
    # Meanwhile the acting process gave instance 2 its runner (77) and recorded it.
    w.store.records[iid(2)] = HandoverRecord(iid(2), POOL, GPU, asked_at=T0, runner_id=77).to_json()
    w.add_instance(2)
    w.tick(later(60))
    assert [a[0] for a in w.registrar.asked] == [f"{POOL}-{iid(1)}"]


def test_a_never_online_instance_whose_termination_fails_gets_no_second_config() -> None:
    """Its runner was deleted at GitHub; the instance must be terminated, never handed a
    new runner (exactly one config per instance), even when AWS refuses once."""
    w = World()
    w.add_instance(1)
    w.tick(T0)
    w.pool.fail("terminate_instance", POOL, *[TransientError("throttled", code="x")] * 3)
    w.tick(later(901))
    assert w.runner_of(1) is None and iid(1) in w.live_ids()
    w.tick(later(931))
    assert iid(1) not in w.live_ids()
    assert len(w.registrar.asked) == 1
    assert w.store.records == {} and w.params.values == {}


def test_a_webhook_tick_on_the_last_poll_s_runners_does_not_call_a_new_runner_spent() -> None:
    """Found running `make demo`: "runner ci-gpu-multi-i-… ran its job: instance
    terminated" a fraction of a second after its config was made, before the machine had
    booted, then again for each replacement. A webhook-woken tick answers jobs from its
    index with ``observed_at`` = now but keeps the last poll's runner list, which
    predates the new runner; the spent check ("a poll taken after its registration no
    longer lists it") compared the record with ``observed_at`` and terminated the machine.
    It now compares with when the runner list was read (``runners_observed_at``)."""
    w = World()
    w.add_instance(1)
    w.tick(T0)  # the config is asked for at T0; the runner is registered
    runner = w.runner_of(1)
    assert runner is not None
    poll_before = T0 - timedelta(seconds=1)  # the last real poll, before the registration
    stale = replace(observation((), later(1)), runners_observed_at=poll_before)
    w.pool.now = later(1)
    w.scaler.step(snapshot({GPU: 1}, at=later(1)), stale, later(1), observation_fresh=True)
    assert ("terminate_instance", POOL, iid(1)) not in w.pool.calls
    assert w.spent() == 0
    assert iid(1) in w.store.records
    # a real poll after the registration that no longer lists it still means spent
    del w.source.runners[runner.id]
    w.tick(later(30))
    assert ("terminate_instance", POOL, iid(1)) in w.pool.calls
    assert w.spent() == 1


def test_a_never_online_runner_deleted_is_not_deleted_again_from_the_last_poll_s_list() -> None:
    """From the closing note: the ephemeral duties deleted a JIT runner that never came
    online and terminated its machine; the webhook ticks after it planned with the last
    poll's runner list, where the runner was still listed, offline, its instance gone, so
    the policy's offline-runner cleanup deleted it again each tick: a 404 from GitHub
    every tick until the next reconcile. The scaler now remembers the duties' deletions
    as it remembers its own."""
    w = World()
    w.add_instance(1)
    w.tick(T0)
    runner = w.runner_of(1)
    assert runner is not None
    poll = (runner,)  # the poll at later(901) read it, offline
    for seconds in (901, 906, 911):
        now = later(seconds)
        w.pool.now = now
        obs = replace(observation(poll, now), runners_observed_at=later(901))
        w.scaler.step(snapshot({GPU: 0}, at=now), obs, now, observation_fresh=True)
    assert w.runner_of(1) is None and iid(1) not in w.live_ids()
    gone = w.metrics.registry.get_sample_value(
        "ci_autoscaler_runner_deletions_already_gone_total", {"runner_type": GPU, "pool": POOL}
    )
    assert (gone or 0.0) == 0.0
    assert w.scaler.last_problems == []
