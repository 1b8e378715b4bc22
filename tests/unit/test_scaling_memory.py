"""The scaler's memory across restarts and failovers: capacity back-off, the
last scale-up, refused launches and pending terminations are kept in the state store.

Before, they lived in the process (README "Known limitations"): after a restart a pool out
of capacity was asked again at once, and a deregistered runner's instance waited for the
orphan sweep.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, RetryConfig
from autoscaler.errors import (
    CapacityError,
    NotLeaderError,
    StateError,
    StateUnavailableError,
    TransientError,
)
from autoscaler.scale.memory import (
    PoolMemory,
    Recollection,
    ScalingMemoryStore,
    memory_of,
    with_memory,
)
from autoscaler.scale.plan import PendingTermination, ScalingState
from autoscaler.scale.scaler import Scaler
from autoscaler.state.sqlite import SqliteStore
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

CFG = config(rtype(pools=("gpu-spot", "gpu-od"), boot_timeout=86400)).model_copy(
    update={"aws": AwsConfig(retry=RetryConfig(max_attempts=3))}
)
PENDING = PendingTermination(GPU, "gpu-spot", iid(7), f"gpu-spot-{iid(7)}", T0)


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(ScalingState(), id="nothing"),
        pytest.param(
            ScalingState(
                backoff_until={"gpu-spot": T0 + timedelta(seconds=300)},
                backoff_seconds={"gpu-spot": 300.0},
            ),
            id="back-off",
        ),
        pytest.param(ScalingState(scaled_up_at={"gpu-od": T0}), id="last-scale-up"),
        pytest.param(
            ScalingState(
                backoff_until={"gpu-od": T0 + timedelta(seconds=1800)},
                backoff_seconds={"gpu-od": 1800.0},
                refused={"gpu-od": ("VcpuLimitExceeded", "You have requested more vCPU")},
            ),
            id="refused",
        ),
        pytest.param(ScalingState(pending_terminations={iid(7): PENDING}), id="pending"),
        pytest.param(
            ScalingState(pending_terminations={iid(7): replace(PENDING, deregistered=False)}),
            id="scale-in-under-way",
        ),
    ],
)
def test_memory_round_trips_through_json(state: ScalingState) -> None:
    memory = memory_of(state)
    stored = {p: PoolMemory.from_dict(p, m.to_dict()) for p, m in memory.items()}
    assert stored == memory
    back = with_memory(ScalingState(idle_since={1: T0}), stored)
    assert memory_of(back) == memory
    assert back.idle_since == {1: T0}, "the observed part is kept"
    assert back.pending_terminations == state.pending_terminations


def test_an_older_pending_row_without_the_flag_was_deregistered() -> None:
    """Rows written before the field existed held only deregistered runners."""
    row = PoolMemory(pending=(PENDING,)).to_dict()
    del row["pending"][0]["deregistered"]
    assert PoolMemory.from_dict("gpu-spot", row).pending == (PENDING,)


@dataclass
class MemoryStore:
    """A ScalingMemoryStore in a dict, failing on demand."""

    pools: dict[str, PoolMemory] = field(default_factory=dict)
    loads: int = 0
    saves: list[tuple[dict[str, PoolMemory], list[str]]] = field(default_factory=list)
    fail_load: StateError | None = None
    fail_save: StateError | None = None

    def load_pools(self) -> dict[str, PoolMemory]:
        self.loads += 1
        if self.fail_load is not None:
            raise self.fail_load
        return dict(self.pools)

    def save_pools(self, put: Mapping[str, PoolMemory], drop: Collection[str]) -> None:
        if self.fail_save is not None:
            raise self.fail_save
        self.saves.append((dict(put), list(drop)))
        self.pools.update(put)
        for p in drop:
            self.pools.pop(p, None)


BACKED_OFF = ScalingState(
    backoff_until={"gpu-spot": T0 + timedelta(seconds=300)}, backoff_seconds={"gpu-spot": 300.0}
)


def test_a_leader_reads_once_a_follower_every_tick() -> None:
    store = MemoryStore(memory_of(BACKED_OFF))
    errors: list[StateError] = []
    leader = Recollection(store, errors.append)
    state = leader.recall(ScalingState(), acting=True)
    assert state.backoff_seconds == {"gpu-spot": 300.0}
    leader.recall(state, acting=True)
    assert store.loads == 1, "the only writer's own memory is the newest"
    follower = Recollection(store, errors.append)
    for _ in range(3):
        follower.recall(ScalingState(), acting=False)
    assert store.loads == 4
    follower.recall(ScalingState(), acting=True)  # it just became the leader: read again
    assert store.loads == 5 and errors == []


def test_only_changed_pools_are_written_and_forgotten_ones_dropped() -> None:
    store = MemoryStore(memory_of(BACKED_OFF))
    r = Recollection(store, lambda exc: None)
    state = r.recall(ScalingState(), acting=True)
    r.remember(state)
    assert store.saves == [], "nothing changed"
    r.remember(state.scaled_up("gpu-od", T0))
    assert store.saves == [({"gpu-od": PoolMemory(scaled_up_at=T0)}, [])]
    r.remember(ScalingState(scaled_up_at={"gpu-od": T0}))
    assert store.saves[-1] == ({}, ["gpu-spot"]), "a back-off that ended is dropped"


def test_a_failed_write_keeps_the_memory_and_is_written_later() -> None:
    store = MemoryStore()
    errors: list[StateError] = []
    r = Recollection(store, errors.append)
    r.recall(ScalingState(), acting=True)
    store.fail_save = StateUnavailableError("throttled", path="t", code="throttled")
    r.remember(BACKED_OFF)
    assert [e.code for e in errors] == ["throttled"]
    assert r.recall(BACKED_OFF, acting=True) == BACKED_OFF, "not overwritten by the store"
    store.fail_save = None
    r.remember(BACKED_OFF)
    assert store.pools == memory_of(BACKED_OFF)


def test_a_failed_read_leaves_the_state_and_is_tried_again() -> None:
    store = MemoryStore(memory_of(BACKED_OFF))
    store.fail_load = StateUnavailableError("unreachable", path="t", code="unreachable")
    errors: list[StateError] = []
    r = Recollection(store, errors.append)
    assert r.recall(ScalingState(), acting=True) == ScalingState()
    r.remember(ScalingState(scaled_up_at={"gpu-od": T0}))
    assert store.saves == [], "never read: never overwrite what was not seen"
    store.fail_load = None
    assert r.recall(ScalingState(), acting=True) == BACKED_OFF


def make(fake: FakePool, source: FakeSource, store: ScalingMemoryStore) -> Scaler:
    return Scaler(
        fake,
        source,
        CFG,
        Metrics(CollectorRegistry()),
        sleep=lambda _: None,
        rng=random.Random(0),
        memory=store,
        **handover_ports(source),
    )


def tick(s: Scaler, queued: int = 0, at: timedelta = timedelta(0), *, dry: bool = False) -> None:
    runners = tuple(getattr(s.source, "runners", {}).values())
    now = T0 + at
    s.step(snapshot({GPU: queued}, at=now), observation(runners, now), now,
           observation_fresh=True, dry_run=dry)  # fmt: skip


def test_a_restarted_controller_keeps_a_pool_backed_off(tmp_path: Path) -> None:
    """Regression: capacity back-off lived in the process. A restart (a deploy, a crash)
    forgot that gpu-spot had no capacity, and the next tick asked it again at once. Now
    the new process reads the back-off from the state file and goes to gpu-od."""
    path = tmp_path / "state.db"
    fake = FakePool({"gpu-spot": pool("gpu-spot", max_size=3), "gpu-od": pool("gpu-od")})
    no = CapacityError("no", code="InsufficientInstanceCapacity")
    fake.fail("set_desired_capacity", "gpu-spot", no)
    first = SqliteStore(path)
    tick(make(fake, FakeSource(), first), queued=2)
    assert fake.pools["gpu-od"].desired_capacity == 2
    first.close()

    fake.calls.clear()
    second = SqliteStore(path)
    s = make(fake, FakeSource(), second)
    tick(s, queued=4, at=timedelta(seconds=60))
    assert ("set_desired_capacity", "gpu-spot", 2) not in fake.calls
    assert next(c for c in fake.calls if c[0] == "set_desired_capacity")[1] == "gpu-od"
    assert s.state.in_backoff("gpu-spot", T0 + timedelta(seconds=60))
    second.close()


def test_a_restarted_controller_terminates_what_was_deregistered(tmp_path: Path) -> None:
    """Regression: a termination that failed after its runner was deregistered was kept in
    the process only; after a restart the instance waited for the orphan sweep
    (``boot_timeout``, here a day). Now the new process retries it first."""
    path = tmp_path / "state.db"
    fake = FakePool(
        {
            "gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot"), inst(2, "gpu-spot")]),
            "gpu-od": pool("gpu-od"),
        }
    )
    source = FakeSource({1: runner(1, "gpu-spot"), 2: runner(2, "gpu-spot")})
    first = SqliteStore(path)
    s = make(fake, source, first)
    tick(s)
    fake.fail("terminate_instance", "gpu-spot", *[TransientError("slow", code="Throttling")] * 6)
    tick(s, at=timedelta(seconds=601))
    assert source.removed == [1, 2] and len(fake.pools["gpu-spot"].instances) == 2
    first.close()

    fake.calls.clear()
    second = SqliteStore(path)
    restarted = make(fake, source, second)
    tick(restarted, at=timedelta(seconds=640))
    assert [c[0] for c in fake.calls[:3]] == [
        "describe",
        "terminate_instance",
        "terminate_instance",
    ]
    assert len(fake.pools["gpu-spot"].instances) == 0
    assert second.load_pools() == {}, "done: nothing left to remember"
    second.close()


class Killed(BaseException):
    """kill -9 at that call: nothing after it runs (no handler catches a BaseException)."""


def crash_at_termination(fake: FakePool) -> None:
    fake.fail("terminate_instance", "gpu-spot", Killed())  # type: ignore[arg-type]


ONE_POOL = config(rtype(pools=("gpu-spot",), idle_timeout=2, boot_timeout=30))


def two_instances_one_idle() -> tuple[FakePool, FakeSource]:
    fake = FakePool({"gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot", age=8),
                                                   inst(2, "gpu-spot", age=8)])})  # fmt: skip
    return fake, FakeSource({1: runner(1, "gpu-spot"), 2: runner(2, "gpu-spot", busy=True)})


def leader(fake: FakePool, source: FakeSource, store: ScalingMemoryStore) -> Scaler:
    return Scaler(fake, source, ONE_POOL, Metrics(CollectorRegistry()), sleep=lambda _: None,
                  rng=random.Random(0), memory=store, **handover_ports(source))  # fmt: skip


def test_a_leader_killed_between_deregistering_and_terminating_leaves_no_ghost() -> None:
    """Regression (the two-controller kill -9 test's quiet stretch): the leader
    deregistered an idle runner and was killed before it terminated the instance. The
    scale-in lived only in its process. The new leader saw an instance without a runner,
    launched 8 s before: one still booting, by the policy. It counted it as supply for the
    queued job and held, no leader-only action at all, until ``boot_timeout`` (30 s in
    that test) after the launch made it an orphan. Now the scale-in is in the state store
    before the runner is deregistered; the new leader terminates the instance at its
    first tick and scales up at the next."""
    fake, source = two_instances_one_idle()
    store = MemoryStore()
    first = leader(fake, source, store)
    tick(first)
    crash_at_termination(fake)
    with pytest.raises(Killed):
        tick(first, at=timedelta(seconds=3))
    assert source.removed == [1] and len(fake.pools["gpu-spot"].instances) == 2

    fake.calls.clear()
    successor = leader(fake, source, store)
    tick(successor, queued=1, at=timedelta(seconds=5))
    assert ("terminate_instance", "gpu-spot", iid(1)) in fake.calls
    assert source.lookups == [f"gpu-spot-{iid(1)}"], "GitHub asked: the runner is gone"
    tick(successor, queued=1, at=timedelta(seconds=7))
    assert ("set_desired_capacity", "gpu-spot", 2) in fake.calls
    assert store.pools["gpu-spot"].pending == (), "nothing left to finish"


def test_a_scale_in_that_never_reached_github_keeps_the_runner() -> None:
    """Killed after the scale-in was written down but before the deregistration: GitHub
    still has the runner, which may take a job at any moment. The new leader forgets the
    scale-in and terminates nothing; the runner is the policy's again."""
    fake, source = two_instances_one_idle()
    store = MemoryStore()
    first = leader(fake, source, store)
    tick(first)
    source.errors.append(Killed())  # type: ignore[arg-type]
    with pytest.raises(Killed):
        tick(first, at=timedelta(seconds=3))
    [written] = store.pools["gpu-spot"].pending
    assert (written.instance_id, written.deregistered) == (iid(1), False)
    source.runners[1] = runner(1, "gpu-spot", busy=True)  # it took a job meanwhile

    fake.calls.clear()
    successor = leader(fake, source, store)
    tick(successor, at=timedelta(seconds=5))
    assert not [c for c in fake.calls if c[0] == "terminate_instance"]
    assert source.removed == [] and store.pools == {}


def test_no_scale_in_starts_when_it_cannot_be_written_down() -> None:
    """The state store refuses the write (the lease was lost, DynamoDB throttles): no
    runner is deregistered this tick, so nothing is left half done for a successor."""
    fake, source = two_instances_one_idle()
    store = MemoryStore()
    s = leader(fake, source, store)
    tick(s)
    store.fail_save = NotLeaderError("fenced", path="t", code="fenced", operation="save_pools")
    tick(s, at=timedelta(seconds=3))
    assert source.removed == [] and len(fake.pools["gpu-spot"].instances) == 2
    store.fail_save = None
    tick(s, at=timedelta(seconds=4))
    assert source.removed == [1] and len(fake.pools["gpu-spot"].instances) == 1
    assert store.pools == {}


def test_a_follower_decides_with_the_leaders_back_off_and_writes_nothing() -> None:
    store = MemoryStore(memory_of(BACKED_OFF))
    fake = FakePool({"gpu-spot": pool("gpu-spot", max_size=3), "gpu-od": pool("gpu-od")})
    s = make(fake, FakeSource(), store)
    tick(s, queued=2, dry=True)
    assert s.last_plan is not None
    [up] = s.last_plan.scale_ups
    assert [slot.pool for slot in up.slots] == ["gpu-od"], "gpu-spot is backed off"
    assert store.saves == [] and [c for c in fake.calls if c[0] != "describe"] == []


def test_a_lost_lease_is_logged_as_a_warning_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    fake = FakePool({"gpu-spot": pool("gpu-spot", max_size=3), "gpu-od": pool("gpu-od")})
    s = make(fake, FakeSource(), store)
    tick(s)
    store.fail_save = NotLeaderError("fenced", path="t", code="fenced", operation="save_pools")
    tick(s, queued=1, at=timedelta(seconds=30))
    warned = [r for r in caplog.records if "scaling memory" in r.getMessage()]
    assert [r.levelname for r in warned] == ["WARNING"]
    sample = s.metrics.registry.get_sample_value(
        "ci_autoscaler_state_store_errors_total", {"operation": "save_pools", "code": "fenced"}
    )
    assert sample == 1
