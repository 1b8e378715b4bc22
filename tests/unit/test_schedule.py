"""``min_idle`` on a weekly UTC schedule: which value holds at which instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from autoscaler.config.schedule import IdleWindow, MinIdle

MON, FRI, SAT, SUN = 0, 4, 5, 6
WEEKDAYS = frozenset(range(5))
SCHEDULE = MinIdle(
    default=1,
    schedule=(
        IdleWindow(start=8 * 60, end=18 * 60, min_idle=4, days=WEEKDAYS),  # office hours
        IdleWindow(
            start=22 * 60, end=2 * 60, min_idle=2, days=frozenset({FRI})
        ),  # Friday night, past midnight
        IdleWindow(start=0, end=24 * 60, min_idle=0, days=frozenset({SUN})),  # all Sunday
    ),
)


def at(day: int, hh: int, mm: int = 0) -> datetime:
    """2026-11-30 is a Monday; ``day`` 0..6 counts from it."""
    return datetime(2026, 11, 30, hh, mm, tzinfo=UTC) + timedelta(days=day)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        pytest.param(at(MON, 9), 4, id="weekday-inside"),
        pytest.param(at(MON, 8), 4, id="weekday-from-is-inclusive"),
        pytest.param(at(MON, 18), 1, id="weekday-to-is-exclusive"),
        pytest.param(at(MON, 7, 59), 1, id="weekday-before-default"),
        pytest.param(at(SAT, 10), 1, id="weekend-office-hours-default"),
        pytest.param(at(FRI, 23), 2, id="crossing-midnight-evening"),
        pytest.param(at(SAT, 1, 30), 2, id="crossing-midnight-after-counts-start-day"),
        pytest.param(at(SAT, 2), 1, id="crossing-midnight-ends-at-to"),
        pytest.param(at(FRI, 1), 1, id="crossing-midnight-not-started-thursday"),
        pytest.param(at(SUN, 12), 0, id="whole-day-window"),
        pytest.param(
            at(MON, 10).astimezone(timezone(timedelta(hours=2))), 4, id="aware-non-utc-is-utc"
        ),
    ],
)
def test_schedule(now: datetime, expected: int) -> None:
    assert SCHEDULE.at(now) == expected


@pytest.mark.parametrize(
    ("min_idle", "now", "expected"),
    [
        pytest.param(MinIdle(default=2), at(SAT, 3), 2, id="plain-number-always"),
        pytest.param(MinIdle(), at(MON, 9), 0, id="default-is-zero"),
        pytest.param(
            MinIdle(
                default=0,
                schedule=(
                    IdleWindow(start=0, end=1440, min_idle=5),
                    IdleWindow(start=480, end=1080, min_idle=9),
                ),
            ),
            at(MON, 9),
            5,
            id="first-match-wins",
        ),
        pytest.param(
            MinIdle(default=0, schedule=(IdleWindow(start=23 * 60, end=60, min_idle=3),)),
            at(MON, 0, 30),
            3,
            id="no-days-every-day",
        ),
    ],
)
def test_min_idle_at(min_idle: MinIdle, now: datetime, expected: int) -> None:
    assert min_idle.at(now) == expected


def test_maximum_covers_default_and_windows() -> None:
    assert (SCHEDULE.maximum, MinIdle(default=3).maximum) == (4, 3)
