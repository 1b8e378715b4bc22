"""EC2 interruption events: what they say (pure parsing) and what the controller does.

EventBridge puts the managed groups' EC2 events in an SQS queue (terraform creates both);
:class:`InterruptionHandler` reads it once a tick, before scaling:

- **EC2 Spot Instance Interruption Warning** and **EC2 Instance Rebalance Recommendation**
  (AWS will, or may soon, take the instance): the runner on it, if idle, is deregistered at
  once (it must not take a job it cannot finish; the orphan sweep then ends the instance);
  a busy one is left to finish (AWS gives two minutes); the instance is remembered for the
  job-retry classifier; the pool gets the capacity back-off a failed launch gets, so
  demand moves to the type's next pool.
- **EC2 Instance State-change Notification** ``shutting-down``/``terminated``, and the
  Auto Scaling group's **EC2 Instance Terminate Successful** (a health check, rebalancing):
  remembered (a job that ran there was lost to infrastructure); other states are counted
  and dropped.

An instance's pool is the group that lists it, or listed it (a ``terminated`` event
arrives when the group no longer does), or the pool its runner is named after. A message
that is not an EC2 event, or names an instance no managed pool holds, is
counted (``ci_autoscaler_interruptions_total{pool="none"|"unmanaged",kind}``), logged and
deleted: it would only come back. A message is deleted once handled; a dry run (a
follower's tick, ``once --dry-run``) does not read the queue at all: a message received is
hidden from the leader for the queue's visibility timeout. :class:`RecordingPool`
remembers the instances this controller terminates itself (scale-in, orphans), for the
classifier too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from autoscaler.domain import Observation, PoolState
from autoscaler.errors import AutoscalerError, NotFoundError, RejectedError
from autoscaler.job_retry.model import (
    REBALANCE,
    SPOT_INTERRUPTION,
    TERMINATED,
    InstanceEvent,
    InstanceEvents,
)
from autoscaler.ports import JobSource, RunnerPool, instance_id_of

log = logging.getLogger(__name__)

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE_RECOMMENDATION = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
ASG_TERMINATED = "EC2 Instance Terminate Successful"
#: Kinds that are warnings: the pool is backed off, an idle runner deregistered.
WARNINGS = frozenset({SPOT_INTERRUPTION, REBALANCE})
#: Metric kinds of messages that carry no event we use.
NOT_EC2 = "not_ec2"
OTHER_STATE = "other_state"
#: Seconds the first receive of a tick waits for a message (SQS long poll; at most a tenth
#: of ``poll_interval``); later batches of the same tick do not wait. Warnings give two
#: minutes; a tick is every poll_interval.
LONG_POLL = 2.0
BATCHES_PER_TICK = 5
#: Instances whose pool is remembered after they leave it, at most.
KNOWN_INSTANCES = 20_000


@dataclass(frozen=True, slots=True)
class Parsed:
    """A message read: ``event`` (None: nothing we use) and the ``kind`` to count it as."""

    event: InstanceEvent | None
    kind: str


def parse_event(body: str, received: datetime) -> Parsed:
    """An EventBridge event (the body EventBridge gives an SQS target) -> what it says.
    Never raises: anything else is ``not_ec2``. A ``time`` that does not parse (AWS's own
    samples say ``yyyy-mm-ddThh:mm:ssZ``) reads as ``received``."""
    try:
        event: Any = json.loads(body)
    except (ValueError, RecursionError):
        return Parsed(None, NOT_EC2)
    if isinstance(event, dict) and event.get("source") == "aws.autoscaling":
        return _autoscaling(event, received)
    if not isinstance(event, dict) or event.get("source") != "aws.ec2":
        return Parsed(None, NOT_EC2)
    detail = event.get("detail")
    instance = detail.get("instance-id") if isinstance(detail, dict) else None
    if not isinstance(instance, str) or instance_id_of(instance) != instance:
        return Parsed(None, NOT_EC2)
    at = _time(event.get("time"), received)
    kind = event.get("detail-type")
    if kind == SPOT_WARNING:
        action = detail.get("instance-action") if isinstance(detail, dict) else None
        return Parsed(
            InstanceEvent(instance, SPOT_INTERRUPTION, at, f"{kind} ({action})"), SPOT_INTERRUPTION
        )
    if kind == REBALANCE_RECOMMENDATION:
        return Parsed(InstanceEvent(instance, REBALANCE, at, str(kind)), REBALANCE)
    if kind == STATE_CHANGE:
        state = detail.get("state") if isinstance(detail, dict) else None
        if state in ("shutting-down", "terminated"):
            return Parsed(InstanceEvent(instance, TERMINATED, at, f"state {state}"), TERMINATED)
        return Parsed(None, OTHER_STATE)
    return Parsed(None, NOT_EC2)


def _autoscaling(event: dict[str, Any], received: datetime) -> Parsed:
    """``EC2 Instance Terminate Successful``: the group ended an instance (a failed health
    check, rebalancing, a scale-in); its ``Cause`` says which, for people."""
    detail = event.get("detail")
    if event.get("detail-type") != ASG_TERMINATED or not isinstance(detail, dict):
        return Parsed(None, NOT_EC2)
    instance = detail.get("EC2InstanceId")
    if not isinstance(instance, str) or instance_id_of(instance) != instance:
        return Parsed(None, NOT_EC2)
    cause = detail.get("Cause")
    why = (
        f"terminated by its Auto Scaling group: {cause[:300]}"
        if isinstance(cause, str)
        else ("terminated by its Auto Scaling group")
    )
    return Parsed(
        InstanceEvent(instance, TERMINATED, _time(event.get("time"), received), why), TERMINATED
    )


def _time(value: Any, fallback: datetime) -> datetime:
    if not isinstance(value, str):
        return fallback
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return fallback
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


class Message(Protocol):
    @property
    def receipt(self) -> str: ...

    @property
    def body(self) -> str: ...


class InterruptionQueue(Protocol):
    """The queue EventBridge fills (:class:`autoscaler.scale.aws.sqs.SqsInterruptionQueue`)."""

    def receive(self, wait_seconds: float, max_messages: int = 10) -> Sequence[Message]: ...

    def delete(self, receipts: Sequence[str]) -> int: ...


class PoolBackoff(Protocol):
    """The scaler: back a pool off as if a launch in it had failed."""

    def pool_interrupted(self, pool: str, now: datetime, code: str) -> None: ...


class Counter(Protocol):
    def labels(self, *values: str) -> Any: ...


class InterruptionHandler:
    def __init__(
        self,
        queue: InterruptionQueue,
        pool: RunnerPool,
        pool_names: Sequence[str],
        source: JobSource,
        events: InstanceEvents,
        *,
        interruptions: Counter,
        errors: Counter,
        observed: Callable[[], Observation | None],
        backoff: PoolBackoff | None = None,
        long_poll: float = LONG_POLL,
    ) -> None:
        self.queue = queue
        self.long_poll = long_poll
        self.pool = pool
        self.pool_names = tuple(pool_names)
        self.source = source
        self.events = events
        self.interruptions = interruptions
        self.errors = errors
        self.observed = observed
        self.backoff = backoff
        self._logged: set[str] = set()
        self._known: dict[str, str] = {}

    def step(self, now: datetime, *, dry_run: bool = False) -> list[Parsed]:
        if dry_run:
            # Not even read: a received message is hidden from every other reader for the
            # queue's visibility timeout, and the leader must act on it (a follower's ticks
            # and ``once --dry-run`` are dry runs).
            return []
        handled: list[Parsed] = []
        for batch in range(BATCHES_PER_TICK):
            try:
                messages = self.queue.receive(self.long_poll if batch == 0 else 0.0)
            except AutoscalerError as exc:
                self.errors.labels("receive", exc.kind).inc()
                log.warning("interruption queue not read (%s): %s", exc.kind, exc)
                break
            if not messages:
                break
            parsed = [parse_event(m.body, now) for m in messages]
            handled += self._handle(parsed, now)
            try:
                refused = self.queue.delete([m.receipt for m in messages])
            except AutoscalerError as exc:
                self.errors.labels("delete", exc.kind).inc()
                log.warning("interruption messages not deleted (%s): %s", exc.kind, exc)
                break
            if refused:
                self.errors.labels("delete", "refused").inc(refused)
        return handled

    def _handle(self, parsed: Sequence[Parsed], now: datetime) -> list[Parsed]:
        pools = self._pools() if any(p.event is not None for p in parsed) else {}
        self._remember({i.id: name for name, p in pools.items() for i in p.instances})
        for p in parsed:
            if p.event is None:
                self.interruptions.labels("none", p.kind).inc()
                self._once(
                    p.kind,
                    "interruption queue: a message that is not an EC2 event "
                    f"we use ({p.kind}); deleted, further ones only counted",
                )
                continue
            pool = self._known.get(p.event.instance_id) or self._pool_of_runner(p.event.instance_id)
            if pool is None:
                self.interruptions.labels("unmanaged", p.kind).inc()
                log.info(
                    "interruption queue: %s for %s, an instance no managed pool holds",
                    p.kind,
                    p.event.instance_id,
                )
                continue
            self.interruptions.labels(pool, p.kind).inc()
            self.events.add(p.event)
            log.warning("%s: %s of pool %s", p.event.detail, p.event.instance_id, pool)
            if p.kind in WARNINGS:
                if self.backoff is not None:
                    self.backoff.pool_interrupted(pool, now, p.event.detail)
                self._release_runner(p.event.instance_id)
        return list(parsed)

    def _remember(self, where: Mapping[str, str]) -> None:
        """Instance -> pool as described, kept after the instance leaves its group (a
        ``terminated`` event arrives when the group no longer lists it); bounded."""
        self._known.update(where)
        while len(self._known) > KNOWN_INSTANCES:
            del self._known[next(iter(self._known))]

    def _pool_of_runner(self, instance: str) -> str | None:
        """The pool a runner on ``instance`` is named after (``<pool>-<instance id>``, the
        runner-pool module's convention), or None."""
        observation = self.observed()
        runner = (
            next((r for r in observation.runners if instance_id_of(r.name) == instance), None)
            if observation is not None
            else None
        )
        if runner is None:
            return None
        named = [p for p in self.pool_names if runner.name.startswith(f"{p}-")]
        return max(named, key=len) if named else None

    def _pools(self) -> Mapping[str, PoolState]:
        try:
            return self.pool.describe(self.pool_names)
        except AutoscalerError as exc:
            log.warning("pools not described for the interruption queue (%s): %s", exc.kind, exc)
            return {}

    def _release_runner(self, instance: str) -> None:
        observation = self.observed()
        runners = observation.runners if observation is not None else ()
        runner = next((r for r in runners if instance_id_of(r.name) == instance), None)
        if runner is None:
            return
        if runner.busy:
            log.info(
                "runner %s is busy: left to finish its job before %s goes", runner.name, instance
            )
            return
        try:
            self.source.remove_runner(runner.id)
        except RejectedError:  # it took a job meanwhile: left to finish
            log.info("runner %s turned busy: left to finish", runner.name)
        except NotFoundError:
            pass  # already gone
        except AutoscalerError as exc:
            log.warning("runner %s not deregistered (%s): %s", runner.name, exc.kind, exc)
        else:
            log.info(
                "deregistered idle runner %s: its instance %s is being interrupted",
                runner.name,
                instance,
            )

    def _once(self, key: str, message: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning("%s", message)


class RecordingPool:
    """A :class:`RunnerPool` that remembers the instances it terminates (scale-in and
    orphans: a job still running there was lost to infrastructure)."""

    def __init__(self, pool: RunnerPool, events: InstanceEvents, clock: Callable[[], datetime]):
        self._pool = pool
        self._events = events
        self._clock = clock

    def describe(self, names: Sequence[str]) -> dict[str, PoolState]:
        return self._pool.describe(names)

    def set_desired_capacity(self, pool: str, desired: int) -> None:
        self._pool.set_desired_capacity(pool, desired)

    def protect_instances(self, pool: str, instance_ids: Sequence[str]) -> None:
        self._pool.protect_instances(pool, instance_ids)

    def terminate_instance(self, pool: str, instance_id: str) -> None:
        self._pool.terminate_instance(pool, instance_id)
        detail = f"terminated by this controller (pool {pool})"
        self._events.add(InstanceEvent(instance_id, TERMINATED, self._clock(), detail))

    def clock_skew(self) -> float | None:
        return self._pool.clock_skew()

    def __getattr__(self, name: str) -> Any:  # the adapter's extras (tests reach its clients)
        return getattr(self._pool, name)
