"""Pure alert lifecycle: inactive -> pending (``for``) -> FIRING -> RESOLVED.

:func:`advance` takes the stored states, this tick's evaluations and ``now`` and returns
the new states plus the notifications to send: one per transition to FIRING or RESOLVED,
and a repeat FIRING every ``repeat_interval`` while the alert keeps firing. An alert
whose evaluation disappears (its runner type or rule is gone) resolves, unless its rule is
in ``keep_rules`` (the engine passes the queue rules there when the poll failed: no
snapshot means "unknown", not "fine"). A pending alert that stops breaching goes back to
inactive without a notification; a RESOLVED alert is kept for one tick (so views and a
restart see it) and then forgotten.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from autoscaler.alerting.evaluation import Evaluation


class AlertStatus(enum.Enum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True)
class AlertState:
    """The remembered state of one alert (absent from the mapping: inactive)."""

    status: AlertStatus
    evaluation: Evaluation
    """The last evaluation seen (renders a RESOLVED after the rule is gone)."""
    since: datetime
    """When the alert entered ``status``."""
    fired_at: datetime | None = None
    last_notified: datetime | None = None

    @property
    def fingerprint(self) -> str:
        return self.evaluation.fingerprint

    def to_dict(self) -> dict[str, Any]:
        """As a state backend stores it (JSON)."""
        return {
            "status": self.status.value,
            "since": self.since.isoformat(),
            "fired_at": None if self.fired_at is None else self.fired_at.isoformat(),
            "last_notified": None if self.last_notified is None else self.last_notified.isoformat(),
            "evaluation": self.evaluation.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AlertState:
        fired, notified = d.get("fired_at"), d.get("last_notified")
        return cls(
            status=AlertStatus(d["status"]),
            evaluation=Evaluation.from_dict(d["evaluation"]),
            since=datetime.fromisoformat(d["since"]),
            fired_at=None if fired is None else datetime.fromisoformat(fired),
            last_notified=None if notified is None else datetime.fromisoformat(notified),
        )


@dataclass(frozen=True)
class Notification:
    """One transition to tell the receivers about."""

    status: str
    """``FIRING`` or ``RESOLVED``."""
    evaluation: Evaluation
    started_at: datetime
    """When the alert started firing."""
    created_at: datetime
    """When this notification was decided (the tick's ``now``)."""
    ended_at: datetime | None = None
    """When it resolved (RESOLVED only)."""
    repeat: bool = False
    """A repeat FIRING (``repeat_interval`` elapsed), not a new incident."""

    @property
    def fingerprint(self) -> str:
        return self.evaluation.fingerprint

    @property
    def occurred_at(self) -> datetime:
        """FIRING: when it started firing; RESOLVED: when it resolved."""
        return self.ended_at if self.ended_at is not None else self.started_at

    @property
    def id(self) -> str:
        return f"{self.fingerprint}:{self.status}:{self.created_at.isoformat()}"

    @property
    def event_id(self) -> str:
        """This notification's stable id: every delivery of it carries the same one (a
        receiver that sees it twice dedupes on it), every other notification another.

        A hash of the fingerprint, the state and the incident's start (``started_at``):
        FIRING and RESOLVED of one incident differ, and so does the next incident of the
        same alert. A repeat FIRING (``repeat_interval`` elapsed) is a new event, not a
        duplicate delivery of the first: its own ``created_at`` joins the hash, so every
        repeat has its own id. Delivery retries and a resend after a crash send the stored
        notification unchanged, so they repeat its id exactly.
        """
        parts = [self.fingerprint, self.status, _utc_iso(self.started_at)]
        if self.repeat:
            parts.append(_utc_iso(self.created_at))
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "evaluation": self.evaluation.to_dict(),
            "started_at": self.started_at.isoformat(),
            "created_at": self.created_at.isoformat(),
            "ended_at": None if self.ended_at is None else self.ended_at.isoformat(),
            "repeat": self.repeat,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Notification:
        ended = d.get("ended_at")
        return cls(
            status=str(d["status"]),
            evaluation=Evaluation.from_dict(d["evaluation"]),
            started_at=datetime.fromisoformat(d["started_at"]),
            created_at=datetime.fromisoformat(d["created_at"]),
            ended_at=None if ended is None else datetime.fromisoformat(ended),
            repeat=bool(d.get("repeat", False)),
        )


def _utc_iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat()


def _fire(ev: Evaluation, now: datetime) -> tuple[AlertState, Notification]:
    state = AlertState(AlertStatus.FIRING, ev, since=now, fired_at=now, last_notified=now)
    return state, Notification("FIRING", ev, started_at=now, created_at=now)


def _resolve(prev: AlertState, ev: Evaluation, now: datetime) -> tuple[AlertState, Notification]:
    started = prev.fired_at or prev.since
    state = AlertState(AlertStatus.RESOLVED, ev, since=now, fired_at=started, last_notified=now)
    note = Notification("RESOLVED", ev, started_at=started, created_at=now, ended_at=now)
    return state, note


def _step(
    prev: AlertState | None, ev: Evaluation, now: datetime
) -> tuple[AlertState | None, Notification | None]:
    status = None if prev is None else prev.status
    if status in (None, AlertStatus.RESOLVED):
        if not ev.breached:
            return None, None
        if ev.for_ <= 0:
            return _fire(ev, now)
        return AlertState(AlertStatus.PENDING, ev, since=now), None
    assert prev is not None
    if status is AlertStatus.PENDING:
        if not ev.breached:
            return None, None
        if (now - prev.since).total_seconds() >= ev.for_:
            return _fire(ev, now)
        return replace(prev, evaluation=ev), None
    # FIRING
    if not ev.breached:
        return _resolve(prev, ev, now)
    last = prev.last_notified or prev.since
    if (now - last).total_seconds() >= ev.repeat_interval:
        started = prev.fired_at or prev.since
        note = Notification("FIRING", ev, started_at=started, created_at=now, repeat=True)
        return replace(prev, evaluation=ev, last_notified=now), note
    return replace(prev, evaluation=ev), None


def advance(
    states: Mapping[str, AlertState],
    evaluations: Sequence[Evaluation],
    now: datetime,
    *,
    keep_rules: Collection[str] = (),
) -> tuple[dict[str, AlertState], list[Notification]]:
    """One lifecycle step. Returns (new states by fingerprint, notifications in order)."""
    new: dict[str, AlertState] = {}
    notes: list[Notification] = []
    seen: set[str] = set()
    for ev in evaluations:
        fp = ev.fingerprint
        if fp in seen:
            continue
        seen.add(fp)
        state, note = _step(states.get(fp), ev, now)
        if state is not None:
            new[fp] = state
        if note is not None:
            notes.append(note)
    for fp, prev in states.items():
        if fp in seen:
            continue
        if prev.evaluation.rule in keep_rules:
            new[fp] = prev
        elif prev.status is AlertStatus.FIRING:
            gone = prev.evaluation.with_values({**prev.evaluation.values, "threshold_breached": 0})
            state, note = _resolve(prev, gone, now)
            new[fp] = state
            notes.append(note)
    return new, notes
