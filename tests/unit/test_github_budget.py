"""The GitHub budget planner: a pure function of (activity, limits, now), table-tested."""

from __future__ import annotations

import pytest

from autoscaler.observe.github.budget import (
    Activity,
    Limits,
    budget_per_hour,
    pick_due,
    plan_budget,
    refill,
)

NOW = 1_000_000.0
POLL = 30.0
PAT = Limits(limit=5000, remaining=5000, reset=NOW + 3600)


def units(busy: float, quiet: float) -> list[Activity]:
    """One busy and one quiet unit with these costs (the planner only sums them)."""
    return [Activity(True, busy), Activity(False, quiet)]


@pytest.mark.parametrize(
    ("activity", "fixed", "limits", "expected"),
    [
        pytest.param(units(10, 10), 3, PAT, (30, 30, 4000, 2760, False), id="everything-fits"),
        pytest.param(
            units(10, 50), 3, PAT, (30, 90, 4000, 7560, False), id="quiet-stretched-first"
        ),
        pytest.param(units(40, 50), 3, PAT, (60, 900, 4000, 11160, True), id="then-busy-stretched"),
        pytest.param(
            units(10, 10), 40, PAT, (900, 900, 4000, 7200, True), id="runner-list-alone-too-big"
        ),
        pytest.param(
            units(0, 500), 3, PAT, (30, 510, 4000, 60360, False), id="no-busy-repos-no-alert"
        ),
        pytest.param(
            units(40, 50),
            3,
            Limits(limit=15000, remaining=15000, reset=NOW + 3600),
            (30, 30, 12000, 11160, False),
            id="a-github-app-limit",
        ),
        pytest.param(
            units(1, 0),
            0,
            Limits(limit=5000, remaining=1100, reset=NOW + 1800),
            (30, 30, 200, 120, False),
            id="others-spent-the-window",
        ),
        pytest.param(
            units(1, 0),
            0,
            Limits(limit=5000, remaining=900, reset=NOW + 1800),
            (900, 900, 0, 120, True),
            id="window-below-the-reserve",
        ),
        pytest.param(
            units(10, 0), 3, Limits(), (30, 30, 4000, 1560, False), id="limit-not-known-yet"
        ),
        pytest.param(
            units(5, 0.0), 0, PAT, (30, 30, 4000, 600, False), id="quiet-and-unchanged-is-free"
        ),
    ],
)
def test_plan_budget(
    activity: list[Activity],
    fixed: float,
    limits: Limits,
    expected: tuple[float, float, float, float, bool],
) -> None:
    plan = plan_budget(activity, fixed, limits, NOW, POLL, 0.8)
    got = (
        plan.busy_interval,
        plan.quiet_interval,
        round(plan.budget_per_hour),
        round(plan.needed_per_hour),
        plan.too_small,
    )
    assert got == expected
    if not plan.too_small:
        assert plan.planned_per_hour <= plan.budget_per_hour


def test_a_stretched_plan_fits_the_budget() -> None:
    """The quiet-stretched plan costs (3 + 10 + 50 * 30/90) * 120 = 3,560 < 4,000 per hour."""
    plan = plan_budget(units(10, 50), 3, PAT, NOW, POLL, 0.8)
    assert round(plan.planned_per_hour) == 3560


@pytest.mark.parametrize(
    ("limits", "share", "expected"),
    [
        pytest.param(PAT, 0.8, 4000, id="share-of-the-limit"),
        pytest.param(PAT, 0.5, 2500, id="another-share"),
        pytest.param(Limits(limit=5000, remaining=3000, reset=NOW + 1800), 0.8, 4000, id="on-pace"),
        pytest.param(
            Limits(limit=5000, remaining=1500, reset=NOW + 10), 0.8, 4000, id="pace-is-capped"
        ),
        pytest.param(
            Limits(limit=5000, remaining=5000, reset=NOW - 5), 0.8, 4000, id="reset-passed"
        ),
    ],
)
def test_budget_per_hour(limits: Limits, share: float, expected: float) -> None:
    assert round(budget_per_hour(limits, NOW, POLL, share)) == expected


@pytest.mark.parametrize(
    ("units_", "interval", "expected"),
    [
        pytest.param(
            [("a", NOW - 30), ("b", NOW - 60), ("c", None)], 30, ["c", "a", "b"], id="every-tick"
        ),
        pytest.param(
            [(k, NOW - 30 * (i + 1)) for i, k in enumerate("abcdef")],
            90,
            ["f", "e"],
            id="a-third-each-tick-most-overdue-first",
        ),
        pytest.param(
            [("new", None), ("a", NOW - 30), ("b", NOW - 300)], 900, ["new", "b"], id="new-first"
        ),
        pytest.param([("a", NOW), ("b", NOW - 10)], 30, [], id="not-twice-in-a-tick"),
        pytest.param([], 30, [], id="nothing"),
    ],
)
def test_pick_due(
    units_: list[tuple[str, float | None]], interval: float, expected: list[str]
) -> None:
    assert pick_due(units_, interval, POLL, NOW) == expected


@pytest.mark.parametrize(
    ("tokens", "elapsed", "limits", "expected"),
    [
        pytest.param(None, 0, PAT, 1000, id="first-poll-a-full-bucket"),
        pytest.param(0, 30, PAT, 33, id="refills-at-the-budget"),
        pytest.param(990, 300, PAT, 1000, id="never-over-the-burst"),
        pytest.param(
            None,
            0,
            Limits(limit=15000, remaining=15000, reset=NOW + 3600),
            3000,
            id="a-github-app-bursts-more",
        ),
        pytest.param(
            None, 0, Limits(limit=5000, remaining=1200, reset=NOW + 600), 200, id="the-reserve"
        ),
        pytest.param(
            500, 30, Limits(limit=5000, remaining=900, reset=NOW + 600), 0, id="below-reserve"
        ),
        pytest.param(-40, 30, PAT, -7, id="an-overdraft-is-paid-back-first"),
        pytest.param(
            None,
            0,
            Limits(limit=5000, remaining=0, reset=NOW - 1),
            1000,
            id="a-window-that-reset",
        ),
    ],
)
def test_refill(tokens: float | None, elapsed: float, limits: Limits, expected: float) -> None:
    assert round(refill(tokens, elapsed, limits, NOW, POLL, 0.8)) == expected


def test_refill_keeps_a_margin_for_requests_in_flight() -> None:
    limits = Limits(limit=5000, remaining=1200, reset=NOW + 600)
    assert refill(None, 0, limits, NOW, POLL, 0.8, margin=16) == pytest.approx(184)
