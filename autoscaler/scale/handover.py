"""What the controller owes each instance: its runner credential, handed over once. Pure.

Every new instance of a pool gets one credential from the controller, stored as the SSM
SecureString ``<jit.parameter_path>/<pool>/<instance id>`` that only that instance may
read; no instance ever holds a long-lived GitHub credential:

- an **ephemeral** runner type's instance gets a just-in-time (JIT) runner config
  (``POST .../actions/runners/generate-jitconfig``, name ``f"{pool}-{instance_id}"``): the
  runner exists at GitHub from then on (offline until the machine connects), takes one job,
  and GitHub removes it;
- a **persistent** runner type's instance gets a registration token
  (``POST .../actions/runners/registration-token``): it works for an hour and can only
  register runners. The machine *claims* it by deleting the parameter after reading it,
  and registers only when that delete succeeded; so a parameter the controller deletes
  itself (:meth:`HandoverRecord.withdrawn`) was never used, and will never be.

This module decides, from (pools, runners, the ledger of records, config, now) and
nothing else:

- **register**: a live instance with no record gets its credential. For an ephemeral type
  a record that was only *asked for* (the process stopped between asking GitHub and saving
  the answer: :attr:`HandoverRecord.runner_id` is None) is registered again as a recovery:
  GitHub may already hold a runner of that name (its 409), which the executor deletes if
  it never came online before it asks again. So each ephemeral instance holds at most one
  runner, across ticks, restarts and leader changes: the ledger is persisted through the
  state store (:class:`HandoverStore`) before GitHub is asked. A persistent instance whose
  runner is registered already (it predates the controller's tokens) gets none; one whose
  token could not be stored (:attr:`HandoverRecord.stored`) gets a new one.
- **spent** (ephemeral): a runner we registered that a complete, fresh poll taken after its
  registration no longer lists ran its job (or was deleted): its instance is terminated
  now, with the group's desired capacity decremented, so the group never replaces it.
- **never online** (ephemeral): a JIT runner still offline ``boot_timeout`` after its
  config was generated: deleted at GitHub (refused while it runs a job), then its instance
  is terminated as an orphan. A persistent instance that never registers is left to the
  orphan sweep, which withdraws its token first (:mod:`autoscaler.scale.handover_duties`).
- **came online**: the runner connected; its parameter has served and is deleted.
- **gone**: the instance left its (described) pool: the record is dropped and a
  parameter left behind deleted.
- **parked** (persistent): the instance went back to its group's warm pool
  (``warm_pool.reuse``). Its record stays, marked :attr:`HandoverRecord.warmed`, and a
  parameter left behind is deleted: the token in it is an hour old when the instance
  returns. Back in service it is handed a fresh token, whether or not a runner of its
  name is still registered (the machine registers again with it, ``--replace``). While
  its pool's warm pool was not described this tick, a record of a reusing pool is kept
  as it is: the instance may be warm.
- **stray parameters**: parameters listed under the path (after a restart: a crash can
  leave one behind) whose instance is gone or whose runner is online.

Demand is unchanged in spirit: one machine per queued job, plus busy ones, plus warm ones
(:mod:`autoscaler.scale.policy`); the executor shows the policy the pools without the
spent and expired instances it terminated, so they are not counted as supply.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from autoscaler.config import Config
from autoscaler.domain import InstanceLifecycle, PoolState, Runner

_LIVE = (InstanceLifecycle.PENDING, InstanceLifecycle.IN_SERVICE)

#: The two credentials: a JIT config (ephemeral types), a registration token (persistent).
JIT, TOKEN = "jit", "token"


def runner_name(pool: str, instance_id: str) -> str:
    """The name an instance's runner registers under (:func:`autoscaler.ports.instance_id_of`
    reads the instance id back)."""
    return f"{pool}-{instance_id}"


@dataclass(frozen=True)
class HandoverRecord:
    """What the controller handed to one instance."""

    instance_id: str
    pool: str
    runner_type: str
    asked_at: datetime
    """When GitHub was (about to be) asked for the credential: saved before the call."""
    kind: str = JIT
    """:data:`JIT` or :data:`TOKEN`."""
    runner_id: int | None = None
    """JIT: the runner GitHub created; None while only asked (see the module docstring)."""
    parameter: bool = False
    """A parameter holding the credential is stored (and must be deleted some day)."""
    online_at: datetime | None = None
    """First poll that saw the runner online (its parameter is deleted then)."""
    expires_at: datetime | None = None
    """TOKEN: when the registration token stops working."""
    withdrawn: bool = False
    """TOKEN: the controller deleted the parameter before the machine claimed it, so the
    machine never had the token and can never register."""
    stored: bool = True
    """TOKEN: storing the parameter succeeded. False after a failed write (which may have
    reached SSM all the same): the next tick hands over a new token, and
    :attr:`expires_at` stays the latest expiry of any token the machine may hold."""
    warmed: bool = False
    """TOKEN: the instance went back to the warm pool since its token was handed over:
    its next stint in service needs a fresh one."""

    @property
    def runner_name(self) -> str:
        return runner_name(self.pool, self.instance_id)

    def to_json(self) -> str:
        return json.dumps(
            {
                "pool": self.pool,
                "runner_type": self.runner_type,
                "asked_at": self.asked_at.isoformat(),
                "kind": self.kind,
                "runner_id": self.runner_id,
                "parameter": self.parameter,
                "online_at": _iso(self.online_at),
                "expires_at": _iso(self.expires_at),
                "withdrawn": self.withdrawn,
                "stored": self.stored,
                "warmed": self.warmed,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, instance_id: str, text: str) -> HandoverRecord:
        """Raises ValueError (or KeyError/TypeError) on a record this code did not write.
        A record written before tokens existed reads as a JIT record."""
        d = json.loads(text)
        kind = str(d.get("kind", JIT))
        if kind not in (JIT, TOKEN):
            raise ValueError(f"unknown credential kind {kind!r}")
        return cls(
            instance_id=instance_id,
            pool=str(d["pool"]),
            runner_type=str(d["runner_type"]),
            asked_at=datetime.fromisoformat(d["asked_at"]),
            kind=kind,
            runner_id=None if d.get("runner_id") is None else int(d["runner_id"]),
            parameter=bool(d.get("parameter", False)),
            online_at=_parse(d.get("online_at")),
            expires_at=_parse(d.get("expires_at")),
            withdrawn=bool(d.get("withdrawn", False)),
            stored=bool(d.get("stored", True)),
            warmed=bool(d.get("warmed", False)),
        )


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def _parse(text: object) -> datetime | None:
    return None if text is None else datetime.fromisoformat(str(text))


class HandoverStore(Protocol):
    """Where the records survive a restart (the state store). Values are
    :meth:`HandoverRecord.to_json` strings keyed by instance id. The method names keep the
    stored names (SQLite table ``jit_records``, DynamoDB items ``pk=jit``) that records
    had before tokens joined them."""

    def load_jit_records(self) -> dict[str, str]: ...

    def save_jit_records(self, put: Mapping[str, str], drop: Collection[str]) -> None: ...


@dataclass(frozen=True)
class Register:
    """Hand ``instance_id`` its credential (``kind``: :data:`JIT` or :data:`TOKEN`)."""

    runner_type: str
    pool: str
    instance_id: str
    labels: tuple[str, ...]
    runner_group_id: int
    recover: bool = False
    """JIT: a record was only asked for: GitHub may already hold a runner of this name."""
    kind: str = JIT

    @property
    def runner_name(self) -> str:
        return runner_name(self.pool, self.instance_id)


@dataclass(frozen=True)
class Spent:
    """The runner ran its job and GitHub removed it: terminate the instance now."""

    runner_type: str
    pool: str
    instance_id: str
    record: HandoverRecord


@dataclass(frozen=True)
class NeverOnline:
    """A JIT runner offline past ``boot_timeout``: delete it, then its instance."""

    runner_type: str
    pool: str
    instance_id: str
    runner_id: int
    record: HandoverRecord


@dataclass(frozen=True)
class StrayParameter:
    pool: str
    instance_id: str


@dataclass(frozen=True)
class HandoverPlan:
    register: tuple[Register, ...] = ()
    spent: tuple[Spent, ...] = ()
    never_online: tuple[NeverOnline, ...] = ()
    came_online: tuple[HandoverRecord, ...] = ()
    """Records whose runner is online now (``online_at`` set): delete their parameter."""
    gone: tuple[HandoverRecord, ...] = ()
    """Records whose instance left its pool: drop them (and a parameter left behind)."""
    stray_parameters: tuple[StrayParameter, ...] = ()
    parked: tuple[HandoverRecord, ...] = ()
    """TOKEN records whose instance went back to the warm pool: mark them
    :attr:`HandoverRecord.warmed` and delete a parameter left behind."""

    @property
    def empty(self) -> bool:
        return not any(
            (
                self.register,
                self.spent,
                self.never_online,
                self.came_online,
                self.gone,
                self.stray_parameters,
                self.parked,
            )
        )


def pool_types(config: Config) -> dict[str, tuple[str, tuple[str, ...], int, bool]]:
    """Pool -> (runner type, its labels sorted, runner group id, ephemeral) for every type."""
    return {
        pool: (rt.name, tuple(sorted(rt.labels)), rt.runner_group_id, rt.ephemeral)
        for rt in config.runner_types
        for pool in rt.pools
    }


def plan_handover(
    config: Config,
    pools: Mapping[str, PoolState],
    runners: Sequence[Runner],
    ledger: Mapping[str, HandoverRecord],
    now: datetime,
    *,
    observed_at: datetime | None,
    observation_fresh: bool,
    runners_complete: bool,
    parameters: Iterable[tuple[str, str]] | None = None,
    exclude: Collection[str] = (),
    warm: Mapping[str, Collection[str]] | None = None,
) -> HandoverPlan:
    """This tick's duties towards every pool's instances. Pure.

    ``observed_at`` is when the poll whose ``runners`` these are started (None: no poll
    yet). Spent, never-online and online runners are judged only on a fresh poll
    (``observation_fresh``) that is complete (``runners_complete``: a skipped runner
    would look removed) and was taken after the record's credential was asked for.
    ``parameters`` are the (pool, instance id) of parameters listed under the path
    (None: not listed this tick). ``exclude``: instances another duty already terminates
    (a scale-in whose termination is pending). ``warm``: pool -> the instances in its
    warm pool, for each pool whose warm pool was described this tick.
    """
    by_name = {r.name: r for r in runners}
    boot = {rt.name: rt.boot_timeout for rt in config.runner_types}
    register: list[Register] = []
    spent: list[Spent] = []
    never: list[NeverOnline] = []
    online: list[HandoverRecord] = []
    live: dict[str, str] = {}
    judged = observation_fresh and runners_complete and observed_at is not None
    for pool, (rt_name, labels, group, ephemeral) in pool_types(config).items():
        state = pools.get(pool)
        if state is None:
            continue
        kind = JIT if ephemeral else TOKEN
        for inst in state.instances:
            if inst.lifecycle not in _LIVE:
                continue
            live[inst.id] = pool
            if inst.id in exclude:
                continue
            record = ledger.get(inst.id)
            if record is not None and record.kind != kind:
                record = None  # the type changed mode: what was handed over no longer fits
            runner = by_name.get(runner_name(pool, inst.id))
            if record is None and not ephemeral and runner is not None:
                continue  # registered without us: nothing to hand over
            if (
                record is None
                or (ephemeral and record.runner_id is None)
                or (not ephemeral and (not record.stored or record.warmed))
            ):
                register.append(
                    Register(
                        rt_name, pool, inst.id, labels, group, recover=record is not None, kind=kind
                    )
                )
                continue
            if not judged or observed_at is None or observed_at <= record.asked_at:
                continue
            if runner is not None and runner.online and record.online_at is None:
                online.append(replace(record, online_at=observed_at))
            elif not ephemeral or record.runner_id is None:
                continue
            elif runner is None:
                spent.append(Spent(rt_name, pool, inst.id, record))
            elif (
                not runner.online
                and record.online_at is None
                and observed_at - record.asked_at > timedelta(seconds=boot[rt_name])
            ):
                never.append(NeverOnline(rt_name, pool, inst.id, record.runner_id, record))
    warm = warm or {}
    reusing = {p.name for p in config.pools if p.warm_pool is not None and p.warm_pool.reuse}
    parked: list[HandoverRecord] = []
    gone_list: list[HandoverRecord] = []
    for iid, rec in sorted(ledger.items()):
        if iid in live or rec.pool not in pools or iid in exclude:
            continue
        if rec.kind == TOKEN and iid in warm.get(rec.pool, ()):
            if not rec.warmed or rec.parameter:
                parked.append(rec)
        elif rec.kind == TOKEN and rec.pool in reusing and rec.pool not in warm:
            continue  # its warm pool is unknown this tick: it may be there
        else:
            gone_list.append(rec)
    gone = tuple(gone_list)
    handled = {g.instance_id for g in (*gone, *parked) if g.parameter}
    stray = tuple(
        StrayParameter(pool, iid)
        for pool, iid in sorted(set(parameters or ()))
        if iid not in handled
        and (
            live.get(iid) != pool
            or ((r := ledger.get(iid)) is not None and r.online_at is not None)
        )
    )
    return HandoverPlan(
        register=tuple(register),
        spent=tuple(spent),
        never_online=tuple(never),
        came_online=tuple(online),
        gone=gone,
        stray_parameters=stray,
        parked=tuple(parked),
    )


def without_instances(
    pools: Mapping[str, PoolState], terminated: Collection[str]
) -> dict[str, PoolState]:
    """The pools as they are once ``terminated`` instances are gone (each termination
    decremented its group's desired capacity): what the policy plans with."""
    if not terminated:
        return dict(pools)
    out: dict[str, PoolState] = {}
    for name, p in pools.items():
        kept = tuple(i for i in p.instances if i.id not in terminated)
        removed = len(p.instances) - len(kept)
        out[name] = (
            p
            if not removed
            else replace(p, instances=kept, desired_capacity=max(0, p.desired_capacity - removed))
        )
    return out
