"""inactive -> pending (for) -> FIRING -> RESOLVED, with an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.alerting.evaluation import Evaluation
from autoscaler.alerting.lifecycle import AlertState, AlertStatus, Notification, advance

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def ev(breached: bool, *, for_: float = 0.0, repeat: float = 3600.0, rule: str = "r") -> Evaluation:
    return Evaluation(
        rule=rule,
        scope="fleet",
        team="t",
        priority="P2",
        description="d",
        receivers=("x",),
        values={"max_queue_size": 7 if breached else 0, "threshold_breached": int(breached)},
        for_=for_,
        repeat_interval=repeat,
    )


def run(
    script: list[tuple[int, bool]], *, for_: float = 0.0, repeat: float = 3600.0
) -> list[tuple[int, str, str]]:
    """Feed (minute, breached) ticks; return (minute, status, notification) per tick."""
    states: dict[str, AlertState] = {}
    out = []
    for minute, breached in script:
        states, notes = advance(
            states, [ev(breached, for_=for_, repeat=repeat)], T0 + timedelta(minutes=minute)
        )
        status = next(iter(states.values())).status.value if states else "inactive"
        note = ",".join(f"{n.status}{'(repeat)' if n.repeat else ''}" for n in notes)
        out.append((minute, status, note))
    return out


@pytest.mark.parametrize(
    ("script", "for_", "expected"),
    [
        pytest.param(
            [(0, True), (1, True), (2, False), (3, False)],
            0.0,
            [
                (0, "firing", "FIRING"),
                (1, "firing", ""),
                (2, "resolved", "RESOLVED"),
                (3, "inactive", ""),
            ],
            id="for-0-fires-at-once-then-resolves-once",
        ),
        pytest.param(
            [(0, True), (4, True), (5, True), (6, True)],
            300.0,
            [(0, "pending", ""), (4, "pending", ""), (5, "firing", "FIRING"), (6, "firing", "")],
            id="pending-for-5m-then-firing",
        ),
        pytest.param(
            [(0, True), (3, False), (4, True), (8, True), (9, True)],
            300.0,
            [
                (0, "pending", ""),
                (3, "inactive", ""),
                (4, "pending", ""),
                (8, "pending", ""),
                (9, "firing", "FIRING"),
            ],
            id="pending-that-clears-restarts-the-for-clock-silently",
        ),
        pytest.param(
            [(0, True), (1, False), (2, True)],
            0.0,
            [(0, "firing", "FIRING"), (1, "resolved", "RESOLVED"), (2, "firing", "FIRING")],
            id="refire-after-resolve-is-a-new-incident",
        ),
    ],
)
def test_transitions(
    script: list[tuple[int, bool]], for_: float, expected: list[tuple[int, str, str]]
) -> None:
    assert run(script, for_=for_) == expected


def test_repeats_only_every_repeat_interval() -> None:
    result = run([(m, True) for m in (0, 30, 59, 60, 61, 119, 120)], repeat=3600.0)
    assert [(m, n) for m, _, n in result if n] == [
        (0, "FIRING"),
        (60, "FIRING(repeat)"),
        (120, "FIRING(repeat)"),
    ]


def test_resolved_notification_carries_times_and_current_values() -> None:
    states, _ = advance({}, [ev(True)], T0)
    states, [note] = advance(states, [ev(False)], T0 + timedelta(minutes=7))
    assert note.status == "RESOLVED"
    assert note.started_at == T0
    assert note.ended_at == note.occurred_at == T0 + timedelta(minutes=7)
    assert note.evaluation.values["threshold_breached"] == 0


def test_alert_whose_evaluation_disappears_resolves() -> None:
    states, _ = advance({}, [ev(True, rule="gone")], T0)
    states, [note] = advance(states, [], T0 + timedelta(minutes=1))
    assert note.status == "RESOLVED"
    assert note.evaluation.values["threshold_breached"] == 0
    assert states[note.fingerprint].status is AlertStatus.RESOLVED


def test_keep_rules_leaves_unknown_alerts_alone() -> None:
    states, _ = advance({}, [ev(True, rule="queue")], T0)
    kept, notes = advance(states, [], T0 + timedelta(minutes=1), keep_rules={"queue"})
    assert notes == []
    assert kept == states


def test_notification_roundtrips_through_dict() -> None:
    _, [note] = advance({}, [ev(True)], T0)
    assert Notification.from_dict(note.to_dict()) == note
