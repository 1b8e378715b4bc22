"""The event_id every notification carries.

The story: the controller killed (kill -9) between a delivery and its outbox delete sends
that notification again on restart (seen: 4 FIRING and 2 RESOLVED for one incident over
21 kills). At-least-once delivery stays; duplicates become harmless because every payload
carries an id that is equal for two deliveries of one notification and different for any
two notifications, so a receiver can dedupe on it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from autoscaler.alerting.evaluation import FLEET, Evaluation
from autoscaler.alerting.lifecycle import AlertStatus, Notification, advance

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
EV = Evaluation(
    "Jobs queueing too long",
    FLEET,
    "pytorch-dev-infra",
    "P2",
    "Jobs wait too long for a runner",
    ("oncall",),
    {"max_queue_size": 7, "threshold_breached": 1},
    repeat_interval=3600.0,
)
CLEARED = EV.with_values({"max_queue_size": 0, "threshold_breached": 0})


def firing(started: datetime = T0) -> Notification:
    return Notification("FIRING", EV, started_at=started, created_at=started)


def test_the_id_of_a_known_notification_is_pinned() -> None:
    """A change of the hash would make every receiver see old notifications as new."""
    assert EV.fingerprint == "c83953ecef9f9fc5"
    assert (
        firing().event_id == "0704f80ab4114a6a"
    )  # sha256 of "c83953ecef9f9fc5\nFIRING\n2026-11-30T03:12:00+00:00"


def test_a_resend_from_the_outbox_carries_the_same_id() -> None:
    """What a crash resends is the stored notification: the id survives the round trip."""
    n = firing()
    assert Notification.from_dict(n.to_dict()).event_id == n.event_id
    later_tick = Notification("FIRING", EV.with_values({**EV.values}), T0, T0)
    assert later_tick.event_id == n.event_id  # values do not enter the id


def test_same_instant_in_another_timezone_is_the_same_id() -> None:
    elsewhere = T0.astimezone(timezone(timedelta(hours=-8)))
    assert firing(elsewhere).event_id == firing().event_id


def test_every_other_notification_has_another_id() -> None:
    """FIRING and RESOLVED of one incident, the next incident of the same alert, and each
    repeat FIRING are distinct events (a repeat is not a duplicate delivery)."""
    states, notes = advance({}, [EV], T0)
    hour = timedelta(hours=1)
    states, repeat1 = advance(states, [EV], T0 + hour)
    states, repeat2 = advance(states, [EV], T0 + 2 * hour)
    states, resolved = advance(states, [CLEARED], T0 + 2 * hour + timedelta(minutes=1))
    assert [s.status for s in states.values()] == [AlertStatus.RESOLVED]
    states, refired = advance({}, [EV], T0 + 3 * hour)
    seen = [n for batch in (notes, repeat1, repeat2, resolved, refired) for n in batch]
    assert [(n.status, n.repeat) for n in seen] == [
        ("FIRING", False),
        ("FIRING", True),
        ("FIRING", True),
        ("RESOLVED", False),
        ("FIRING", False),
    ]
    ids = [n.event_id for n in seen]
    assert len(set(ids)) == len(ids)
    assert seen[3].started_at == seen[0].started_at  # one incident, two states


@pytest.mark.parametrize("status", ["FIRING", "RESOLVED"])
def test_the_id_is_short_hex(status: str) -> None:
    n = Notification(status, EV, started_at=T0, created_at=T0)
    assert len(n.event_id) == 16 and int(n.event_id, 16) >= 0
