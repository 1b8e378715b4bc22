"""Values the job-retry core works on besides completed jobs: what happened to instances.

Completed jobs, their annotations and a run's progress are observations of the CI
provider; they live with the other observed values in :mod:`autoscaler.domain`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

#: Instance event kinds, strongest evidence first (bounded: metric labels).
SPOT_INTERRUPTION = "spot_interruption"
REBALANCE = "rebalance_recommendation"
SPOT_TERMINATED = "spot_terminated"
TERMINATED = "terminated"
EVENT_KINDS = (SPOT_INTERRUPTION, REBALANCE, SPOT_TERMINATED, TERMINATED)
#: AWS interrupted the instance (the others: this controller or the ASG terminated it).
BY_AWS = frozenset({SPOT_INTERRUPTION, REBALANCE, SPOT_TERMINATED})


@dataclass(frozen=True, slots=True)
class InstanceEvent:
    """Something that happened to an instance: ``kind`` one of :data:`EVENT_KINDS`."""

    instance_id: str
    kind: str
    at: datetime
    detail: str = ""
    """For people (the EventBridge ``detail-type``, the ASG's cause); never parsed."""


@dataclass(frozen=True, slots=True)
class InstanceEnd:
    """EC2's word on an instance that has ended (shutting down, terminated, stopping or
    stopped), translated from ``DescribeInstances`` by the cloud adapter
    (:meth:`autoscaler.scale.aws.asg.AwsAsgPool.instance_ends`).

    It is what is left to read when the interruption warning and the state-change event
    never reached us: EC2 keeps a terminated instance, with its ``StateReason``, in
    ``DescribeInstances`` for about an hour."""

    instance_id: str
    spot: bool
    """EC2 ended it to take its Spot capacity back (``StateReason.Code``
    ``Server.SpotInstanceTermination``, or ``Server.SpotInstanceShutdown`` for a Spot
    instance that stops instead); False for every other reason, or none given."""
    code: str = ""
    """EC2's ``StateReason.Code``, for people (logs, evidence); the adapter alone reads it."""


class InstanceEvents:
    """What happened to which instance, for the classifier: filled by the interruption
    reader and by the scaler's terminations, read by the retry stage (thread-safe).

    Bounded: events older than ``keep`` are dropped on every add; at most ``limit`` kept.
    """

    def __init__(self, *, keep: timedelta = timedelta(hours=12), limit: int = 50_000) -> None:
        self._events: dict[str, list[InstanceEvent]] = {}
        self._count = 0
        self._keep = keep
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, event: InstanceEvent) -> None:
        with self._lock:
            self._events.setdefault(event.instance_id, []).append(event)
            self._count += 1
            if self._count > self._limit:
                self._prune(event.at, force=True)

    def prune(self, now: datetime) -> None:
        with self._lock:
            self._prune(now, force=False)

    def _prune(self, now: datetime, *, force: bool) -> None:
        cutoff = now - self._keep
        kept = {i: [e for e in evs if e.at >= cutoff] for i, evs in self._events.items()}
        self._events = {i: evs for i, evs in kept.items() if evs}
        self._count = sum(len(evs) for evs in self._events.values())
        if force and self._count > self._limit:  # still over: keep the newest
            newest = sorted((e for evs in self._events.values() for e in evs), key=lambda e: e.at)[
                -self._limit :
            ]
            self._events = {}
            for e in newest:
                self._events.setdefault(e.instance_id, []).append(e)
            self._count = len(newest)

    def of(self, instance_id: str) -> tuple[InstanceEvent, ...]:
        with self._lock:
            return tuple(self._events.get(instance_id, ()))

    def snapshot(self) -> dict[str, tuple[InstanceEvent, ...]]:
        with self._lock:
            return {i: tuple(evs) for i, evs in self._events.items()}

    def extend(self, events: Iterable[InstanceEvent]) -> None:
        for e in events:
            self.add(e)
