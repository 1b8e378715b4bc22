"""What the scaler must not forget across a restart or a failover, and the port it is kept in.

:class:`autoscaler.scale.plan.ScalingState` is mostly a picture rebuilt from observations
(idle since when, short since when, arrivals): a new process, or a follower that takes
over, has it again within a tick or two. Four things are not observations but memories of
what the controller did or was told, and are lost with the process:

- **capacity back-off** (``backoff_until``, ``backoff_seconds``): forgotten, a pool out of
  capacity is hammered again at once, and its back-off restarts from the initial length;
- **the last scale-up** (``scaled_up_at``): forgotten, a Failed scaling activity caused by
  it is not recognised as ours;
- **refused launches** (``refused``): forgotten, the page for a pool a person must fix
  stops until the pool fails again;
- **pending terminations**: an instance being scaled in (written before its runner is
  deregistered) or whose runner was deregistered but which is not terminated yet.

They are kept per pool as a :class:`PoolMemory` in a :class:`ScalingMemoryStore` (the
state store: SQLite or DynamoDB). :class:`Recollection` keeps the scaler's state and the
store in step: it reads the store before a tick decides (every tick for a follower, whose
picture should match the leader's; once for a leader, the only writer) and writes the
pools whose memory changed after a tick acted. Pure: no I/O of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from autoscaler.errors import StateError
from autoscaler.scale.plan import PendingTermination, ScalingState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolMemory:
    """One pool's durable memory (every field empty: nothing to remember)."""

    backoff_until: datetime | None = None
    backoff_seconds: float | None = None
    scaled_up_at: datetime | None = None
    refused: tuple[str, str] | None = None
    """(code, message) of a launch failure a person must fix."""
    pending: tuple[PendingTermination, ...] = ()
    """Scale-ins under way and terminations not done yet, by instance id order."""

    @property
    def empty(self) -> bool:
        return self == PoolMemory()

    def to_dict(self) -> dict[str, Any]:
        return {
            "backoff_until": _ts(self.backoff_until),
            "backoff_seconds": self.backoff_seconds,
            "scaled_up_at": _ts(self.scaled_up_at),
            "refused": None if self.refused is None else list(self.refused),
            "pending": [
                {
                    "runner_type": p.runner_type,
                    "instance_id": p.instance_id,
                    "runner_name": p.runner_name,
                    "since": p.since.isoformat(),
                    "deregistered": p.deregistered,
                }
                for p in self.pending
            ],
        }

    @classmethod
    def from_dict(cls, pool: str, d: Mapping[str, Any]) -> PoolMemory:
        refused = d.get("refused")
        seconds = d.get("backoff_seconds")
        return cls(
            backoff_until=_dt(d.get("backoff_until")),
            backoff_seconds=None if seconds is None else float(seconds),
            scaled_up_at=_dt(d.get("scaled_up_at")),
            refused=None if refused is None else (str(refused[0]), str(refused[1])),
            pending=tuple(
                PendingTermination(
                    str(p["runner_type"]),
                    pool,
                    str(p["instance_id"]),
                    str(p["runner_name"]),
                    datetime.fromisoformat(p["since"]),
                    bool(p.get("deregistered", True)),
                )
                for p in d.get("pending", ())
            ),
        )


def _ts(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def _dt(s: Any) -> datetime | None:
    return None if s is None else datetime.fromisoformat(str(s))


class ScalingMemoryStore(Protocol):
    """Where pools' memories survive the process (the state store implements it)."""

    def load_pools(self) -> dict[str, PoolMemory]:
        """Every pool with something remembered."""
        ...

    def save_pools(self, put: Mapping[str, PoolMemory], drop: Collection[str]) -> None:
        """Store ``put`` (insert or replace) and forget ``drop``, in one transaction."""
        ...


def memory_of(state: ScalingState) -> dict[str, PoolMemory]:
    """The durable part of ``state``, per pool (pools with nothing to remember left out)."""
    pools = (
        set(state.backoff_until)
        | set(state.backoff_seconds)
        | set(state.scaled_up_at)
        | set(state.refused)
        | {p.pool for p in state.pending_terminations.values()}
    )
    out: dict[str, PoolMemory] = {}
    for pool in sorted(pools):
        pending = sorted(
            (p for p in state.pending_terminations.values() if p.pool == pool),
            key=lambda p: p.instance_id,
        )
        memory = PoolMemory(
            backoff_until=state.backoff_until.get(pool),
            backoff_seconds=state.backoff_seconds.get(pool),
            scaled_up_at=state.scaled_up_at.get(pool),
            refused=state.refused.get(pool),
            pending=tuple(pending),
        )
        if not memory.empty:
            out[pool] = memory
    return out


def with_memory(state: ScalingState, memory: Mapping[str, PoolMemory]) -> ScalingState:
    """``state`` with its durable part replaced by ``memory`` (the observed part kept)."""

    def pick(get: Callable[[PoolMemory], Any]) -> dict[str, Any]:
        return {pool: get(m) for pool, m in memory.items() if get(m) is not None}

    return replace(
        state,
        backoff_until=pick(lambda m: m.backoff_until),
        backoff_seconds=pick(lambda m: m.backoff_seconds),
        scaled_up_at=pick(lambda m: m.scaled_up_at),
        refused=pick(lambda m: m.refused),
        pending_terminations={p.instance_id: p for m in memory.values() for p in m.pending},
    )


class Recollection:
    """Keeps a scaler's durable memory in step with a :class:`ScalingMemoryStore`.

    ``on_error`` hears every StateError (the scaler logs and counts it); a failed read
    leaves the state as it was and is tried again next tick; a failed write is retried
    after the next tick (what was last stored stays the baseline).
    """

    def __init__(self, store: ScalingMemoryStore, on_error: Callable[[StateError], None]) -> None:
        self.store = store
        self.on_error = on_error
        self._stored: dict[str, PoolMemory] | None = None
        self._current = False

    def recall(self, state: ScalingState, *, acting: bool) -> ScalingState:
        """Before a tick decides: the stored memory, unless this process acted last tick
        too (then it is the only writer, and its own memory is the newest)."""
        if acting and self._current:
            return state
        try:
            stored = self.store.load_pools()
        except StateError as exc:
            self.on_error(exc)
            self._current = False
            return state
        self._stored = stored
        self._current = acting
        return with_memory(state, stored)

    def remember(self, state: ScalingState) -> bool:
        """Write the pools whose memory changed (after a tick acted, and before a scale-in
        starts). True when the store holds ``state``'s memory now."""
        if self._stored is None:
            return False  # never read: writing would overwrite what we did not see
        now = memory_of(state)
        put = {pool: m for pool, m in now.items() if self._stored.get(pool) != m}
        drop = [pool for pool in self._stored if pool not in now]
        if not put and not drop:
            return True
        try:
            self.store.save_pools(put, drop)
        except StateError as exc:
            # Our memory stays the newest (a lost lease makes the next tick a follower's,
            # which reads the store again); the next change retries against the old baseline.
            self.on_error(exc)
            return False
        self._stored = now
        return True
