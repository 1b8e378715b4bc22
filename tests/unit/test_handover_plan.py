"""The handover duties of a tick, as a pure function: a table of situations, each with the
duty it must (and only it must) produce, for ephemeral and persistent pools."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from autoscaler.config import Config
from autoscaler.domain import InstanceLifecycle, PoolState, Runner
from autoscaler.scale.handover import (
    JIT,
    TOKEN,
    HandoverPlan,
    HandoverRecord,
    StrayParameter,
    plan_handover,
    without_instances,
)
from tests.unit.scaling_fakes import GPU, T0, config, iid, inst, pool, rtype, runner

POOL = "gpu-spot"
BEFORE = T0 - timedelta(seconds=60)  # a config asked for in the tick before this poll


def eph_config(**kw: Any) -> Config:
    return config(
        rtype(pools=(POOL,), **kw).model_copy(update={"mode": "ephemeral", "runner_group_id": 3})
    )


def rec(n: int, **kw: Any) -> HandoverRecord:
    """Instance ``n``'s record: runner ``n`` registered before this poll, parameter stored."""
    fields: dict[str, Any] = {"asked_at": BEFORE, "runner_id": n, "parameter": True, **kw}
    return HandoverRecord(iid(n), POOL, GPU, **fields)


def plan(
    instances: list[Any],
    runners: list[Runner],
    ledger: list[HandoverRecord],
    *,
    cfg: Config | None = None,
    fresh: bool = True,
    complete: bool = True,
    observed_at: datetime | None = T0,
    parameters: list[tuple[str, str]] | None = None,
    exclude: tuple[str, ...] = (),
) -> HandoverPlan:
    pools = {POOL: pool(POOL, instances)}
    return plan_handover(
        cfg or eph_config(),
        pools,
        runners,
        {r.instance_id: r for r in ledger},
        T0,
        observed_at=observed_at,
        observation_fresh=fresh,
        runners_complete=complete,
        parameters=parameters,
        exclude=exclude,
    )


def duties(p: HandoverPlan) -> dict[str, list[str]]:
    """Which duty each instance got (only the non-empty ones)."""
    out = {
        "register": [r.instance_id for r in p.register],
        "recover": [r.instance_id for r in p.register if r.recover],
        "spent": [s.instance_id for s in p.spent],
        "never_online": [n.instance_id for n in p.never_online],
        "came_online": [r.instance_id for r in p.came_online],
        "gone": [r.instance_id for r in p.gone],
        "stray": [s.instance_id for s in p.stray_parameters],
    }
    return {k: v for k, v in out.items() if v}


BOOTING = InstanceLifecycle.PENDING
CASES = [
    pytest.param(
        [inst(1, POOL, age=5, lifecycle=BOOTING)],
        [],
        [],
        {"register": [iid(1)]},
        id="new-pending-instance-gets-one-config",
    ),
    pytest.param(
        [inst(1, POOL)],
        [runner(1, POOL, online=False)],
        [rec(1)],
        {},
        id="registered-and-booting-needs-nothing",
    ),
    pytest.param(
        [inst(1, POOL)],
        [],
        [rec(1, runner_id=None, parameter=False)],
        {"register": [iid(1)], "recover": [iid(1)]},
        id="intent-only-is-recovered",
    ),
    pytest.param(
        [inst(1, POOL)],
        [runner(1, POOL)],
        [rec(1)],
        {"came_online": [iid(1)]},
        id="online-runner-parameter-goes",
    ),
    pytest.param(
        [inst(1, POOL)],
        [runner(1, POOL, busy=True)],
        [rec(1, online_at=BEFORE, parameter=False)],
        {},
        id="busy-runner-is-left-alone",
    ),
    pytest.param(
        [inst(1, POOL)],
        [],
        [rec(1, online_at=BEFORE, parameter=False)],
        {"spent": [iid(1)]},
        id="runner-removed-by-github-is-spent",
    ),
    pytest.param(
        [inst(1, POOL)],
        [],
        [rec(1)],
        {"spent": [iid(1)]},
        id="spent-before-ever-seen-online",
    ),
    pytest.param(
        [inst(1, POOL)],
        [],
        [rec(1, asked_at=T0)],
        {},
        id="asked-after-the-poll-is-not-spent",
    ),
    pytest.param(
        [inst(1, POOL)],
        [runner(1, POOL, online=False)],
        [rec(1, asked_at=T0 - timedelta(seconds=901))],
        {"never_online": [iid(1)]},
        id="offline-past-boot-timeout",
    ),
    pytest.param(
        [inst(1, POOL)],
        [runner(1, POOL, online=False)],
        [rec(1, asked_at=T0 - timedelta(seconds=899))],
        {},
        id="offline-within-boot-timeout",
    ),
    pytest.param(
        [inst(1, POOL)],
        [runner(1, POOL, online=False)],
        [rec(1, asked_at=T0 - timedelta(seconds=901), online_at=BEFORE, parameter=False)],
        {},
        id="offline-after-being-online-is-not-never-online",
    ),
    pytest.param(
        [],
        [],
        [rec(1)],
        {"gone": [iid(1)]},
        id="instance-gone-record-dropped",
    ),
    pytest.param(
        [inst(1, POOL, lifecycle=InstanceLifecycle.TERMINATING)],
        [],
        [rec(1)],
        {"gone": [iid(1)]},
        id="terminating-instance-is-gone",
    ),
]


@pytest.mark.parametrize(("instances", "runners", "ledger", "expected"), CASES)
def test_duties(
    instances: list[Any], runners: list[Runner], ledger: list[HandoverRecord], expected: Any
) -> None:
    assert duties(plan(instances, runners, ledger)) == expected


@pytest.mark.parametrize(
    "kw",
    [
        pytest.param({"fresh": False}, id="stale-poll"),
        pytest.param({"complete": False}, id="a-runner-was-skipped"),
        pytest.param({"observed_at": None}, id="never-polled"),
    ],
)
def test_absence_is_only_judged_on_a_fresh_complete_poll(kw: dict[str, Any]) -> None:
    """A runner missing from a stale or partial list may be busy: never spent then."""
    old = T0 - timedelta(seconds=901)
    p = plan(
        [inst(1, POOL), inst(2, POOL)],
        [runner(2, POOL, online=False)],
        [rec(1), rec(2, asked_at=old)],
        **kw,
    )
    assert duties(p) == {}


def tok(n: int, **kw: Any) -> HandoverRecord:
    """Instance ``n``'s registration token, stored before this poll."""
    fields: dict[str, Any] = {"asked_at": BEFORE, "kind": TOKEN, "parameter": True, **kw}
    return HandoverRecord(iid(n), POOL, GPU, expires_at=BEFORE + timedelta(hours=1), **fields)


PERSISTENT = [
    pytest.param([inst(1, POOL)], [], [], {"register": [iid(1)]}, id="new-instance-gets-a-token"),
    pytest.param(
        [inst(1, POOL)],
        [runner(1, POOL)],
        [],
        {},
        id="registered-without-us-needs-none",
    ),
    pytest.param([inst(1, POOL)], [], [tok(1)], {}, id="token-handed-over-waits"),
    pytest.param(
        [inst(1, POOL)],
        [],
        [tok(1, stored=False)],
        {"register": [iid(1)], "recover": [iid(1)]},
        id="token-not-stored-is-asked-again",
    ),
    pytest.param(
        [inst(1, POOL)],
        [runner(1, POOL)],
        [tok(1)],
        {"came_online": [iid(1)]},
        id="registered-runner-parameter-goes",
    ),
    pytest.param(
        [inst(1, POOL)],
        [runner(1, POOL, online=False)],
        [tok(1, asked_at=T0 - timedelta(seconds=901))],
        {},
        id="never-online-is-the-orphan-sweeps",
    ),
    pytest.param(
        [inst(1, POOL)],
        [],
        [tok(1, online_at=BEFORE, parameter=False)],
        {},
        id="runner-gone-is-not-spent",
    ),
    pytest.param([], [], [tok(1)], {"gone": [iid(1)]}, id="instance-gone-record-dropped"),
]


@pytest.mark.parametrize(("instances", "runners", "ledger", "expected"), PERSISTENT)
def test_persistent_duties(
    instances: list[Any], runners: list[Runner], ledger: list[HandoverRecord], expected: Any
) -> None:
    got = plan(instances, runners, ledger, cfg=config(rtype(pools=(POOL,))))
    assert duties(got) == expected
    assert all(r.kind == TOKEN for r in got.register)


def test_a_type_that_changed_mode_gets_the_credential_of_its_new_mode() -> None:
    [r] = plan([inst(1, POOL)], [], [tok(1)]).register
    assert r.kind == JIT and not r.recover


def test_excluded_instances_get_no_duty() -> None:
    """An instance whose scale-in termination is pending is not also 'spent'."""
    assert duties(plan([inst(1, POOL)], [], [rec(1)], exclude=(iid(1),))) == {}


def test_register_carries_the_types_labels_and_group() -> None:
    [r] = plan([inst(1, POOL)], [], []).register
    assert (r.runner_name, r.labels, r.runner_group_id) == (
        f"{POOL}-{iid(1)}",
        tuple(sorted({"self-hosted", GPU})),
        3,
    )


@pytest.mark.parametrize(
    ("params", "ledger", "stray"),
    [
        pytest.param([(POOL, iid(9))], [], [iid(9)], id="instance-gone-no-record"),
        pytest.param([(POOL, iid(1))], [], [], id="live-instance-kept-for-its-handover"),
        pytest.param(
            [(POOL, iid(1))],
            [rec(1, online_at=BEFORE, parameter=False)],
            [iid(1)],
            id="runner-online-parameter-left",
        ),
        pytest.param([("other", iid(1))], [], [iid(1)], id="wrong-pool"),
        pytest.param([(POOL, iid(8))], [rec(8)], [], id="gone-record-deletes-it-already"),
    ],
)
def test_parameters_left_behind(
    params: list[tuple[str, str]], ledger: list[HandoverRecord], stray: list[str]
) -> None:
    p = plan([inst(1, POOL)], [runner(1, POOL, online=False)], ledger, parameters=params)
    assert [s.instance_id for s in p.stray_parameters] == stray
    assert all(isinstance(s, StrayParameter) for s in p.stray_parameters)


def test_records_round_trip_through_json() -> None:
    for r in (rec(1, online_at=T0), tok(2, withdrawn=True, stored=False)):
        assert HandoverRecord.from_json(r.instance_id, r.to_json()) == r
    old = '{"pool": "p", "runner_type": "t", "asked_at": "2026-01-01T00:00:00+00:00"}'
    assert HandoverRecord.from_json("i-1", old).kind == JIT  # written before tokens existed
    with pytest.raises((ValueError, KeyError)):
        HandoverRecord.from_json("i-1", "{}")


def test_without_instances_takes_terminated_ones_out_of_supply() -> None:
    pools: dict[str, PoolState] = {POOL: pool(POOL, [inst(1, POOL), inst(2, POOL)])}
    after = without_instances(pools, {iid(1)})
    assert [i.id for i in after[POOL].instances] == [iid(2)]
    assert after[POOL].desired_capacity == 1
    assert without_instances(pools, ()) == pools


def test_the_sqlite_state_store_keeps_the_ledger_across_a_restart(tmp_path: Any) -> None:
    """The handover ledger lives in the state store: a new process reads what the last saved."""
    from autoscaler.state.sqlite import SqliteStore  # noqa: PLC0415 (an adapter, here only)

    path = tmp_path / "state.db"
    store = SqliteStore(path)
    r = rec(1)
    store.save_jit_records({r.instance_id: r.to_json(), iid(2): rec(2).to_json()}, ())
    store.save_jit_records({}, [iid(2)])
    store.close()
    again = SqliteStore(path)
    loaded = again.load_jit_records()
    again.close()
    assert {k: HandoverRecord.from_json(k, v) for k, v in loaded.items()} == {r.instance_id: r}
