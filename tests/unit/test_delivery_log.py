"""The delivery log's decisions: what an answer means, what to redeliver, a clean window."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.observe.github.delivery_log import (
    Attempt,
    Result,
    classify,
    parse_attempt,
    read_enough,
    review,
)
from autoscaler.observe.github.parse import BadItem

CLASSES = [
    ("ok-200", 200, Result.OK),
    ("ok-202", 202, Result.OK),
    ("duplicate-409-the-listener-has-it", 409, Result.OK),
    ("no-answer-0", 0, Result.RETRY),
    ("failed-to-connect-502", 502, Result.RETRY),
    ("listener-queue-full-503", 503, Result.RETRY),
    ("timeout-408", 408, Result.RETRY),
    ("throttled-429", 429, Result.RETRY),
    ("wrong-secret-401", 401, Result.PERMANENT),
    ("malformed-400", 400, Result.PERMANENT),
    ("too-large-413", 413, Result.PERMANENT),
    ("unknown-action-422", 422, Result.PERMANENT),
    ("redirect-not-followed-301", 301, Result.PERMANENT),
]


@pytest.mark.parametrize(("code", "result"), [c[1:] for c in CLASSES], ids=[c[0] for c in CLASSES])
def test_an_answer_is_classified_by_what_a_redelivery_can_change(code: int, result: Result) -> None:
    assert classify(code) is result


def a(
    ident: int, guid: str, at: float, code: int, event: str = "workflow_job", again: bool = False
) -> Attempt:
    return Attempt(ident, guid, at, again, code, event, "queued")


#: id, attempts, judged ids, since, complete, skipped -> (redelivered ids, permanent ids,
#: failed events, clean)
REVIEWS: list[tuple[str, list[Attempt], set[int], float | None, bool, int, tuple[Any, ...]]] = [
    ("all-delivered-clean", [a(2, "g2", 110, 202), a(1, "g1", 100, 200)], set(), 50, True, 0,
     ((), (), 0, True)),
    ("one-dropped-redelivered-not-clean", [a(2, "g2", 110, 502), a(1, "g1", 100, 202)], set(),
     50, True, 0, ((2,), (), 1, False)),
    ("a-later-attempt-delivered-it-clean", [a(3, "g1", 120, 202, again=True),
     a(1, "g1", 100, 503)], set(), 50, True, 0, ((), (), 0, True)),
    ("the-newest-failed-attempt-is-redelivered", [a(3, "g1", 120, 502, again=True),
     a(1, "g1", 100, 503)], set(), 50, True, 0, ((3,), (), 1, False)),
    ("judged-before-not-again-clean", [a(1, "g1", 100, 502)], {1}, 50, True, 0,
     ((), (), 0, True)),
    ("our-redelivery-failed-again", [a(4, "g1", 130, 502, again=True), a(1, "g1", 100, 502)],
     {1}, 50, True, 0, ((4,), (), 1, False)),
    ("older-than-since-not-judged", [a(1, "g1", 40, 502)], set(), 50, True, 0,
     ((), (), 0, True)),
    ("wrong-secret-permanent", [a(1, "g1", 100, 401)], set(), 50, True, 0,
     ((), (1,), 1, False)),
    ("other-events-ignored", [a(1, "g1", 100, 502, event="ping")], set(), 50, True, 0,
     ((), (), 0, True)),
    ("incomplete-read-not-clean", [a(1, "g1", 100, 202)], set(), 50, False, 0,
     ((), (), 0, False)),
    ("skipped-item-not-clean", [a(1, "g1", 100, 202)], set(), 50, True, 1, ((), (), 0, False)),
    ("duplicate-409-clean", [a(1, "g1", 100, 409)], set(), 50, True, 0, ((), (), 0, True)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("attempts", "judged", "since", "complete", "skipped", "expected"),
    [r[1:] for r in REVIEWS],
    ids=[r[0] for r in REVIEWS],
)
def test_review(
    attempts: list[Attempt],
    judged: set[int],
    since: float | None,
    complete: bool,
    skipped: int,
    expected: tuple[Any, ...],
) -> None:
    verdict = review(attempts, judged=judged, since=since, complete=complete, skipped=skipped)
    got = (
        tuple(x.id for x in verdict.redeliver),
        tuple(x.id for x in verdict.permanent),
        verdict.failed,
        verdict.clean,
    )
    assert got == expected


def test_redeliveries_over_the_cap_are_postponed_oldest_first() -> None:
    attempts = [a(i, f"g{i}", 100 + i, 502) for i in range(1, 6)]
    verdict = review(attempts, judged=set(), since=50, complete=True, max_redeliveries=2)
    assert [x.id for x in verdict.redeliver] == [1, 2]
    assert (
        [x.id for x in verdict.postponed] == [3, 4, 5] and verdict.failed == 5 and not verdict.clean
    )


ITEM = {
    "id": 12345678,
    "guid": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
    "delivered_at": "2019-06-03T00:57:16Z",
    "redelivery": False,
    "duration": 0.27,
    "status": "OK",
    "status_code": 200,
    "event": "workflow_job",
    "action": "queued",
    "installation_id": 123,
    "repository_id": 456,
    "throttled_at": None,
}


def test_the_documented_example_item_parses() -> None:
    got = parse_attempt(ITEM)
    assert (got.id, got.status_code, got.event, got.redelivery) == (
        12345678,
        200,
        "workflow_job",
        False,
    )
    assert got.delivered_at == 1559523436.0


BAD_ITEMS = [
    ("not-an-object", [1, 2]),
    ("no-id", {k: v for k, v in ITEM.items() if k != "id"}),
    ("id-a-string", {**ITEM, "id": "12345678"}),
    ("id-a-bool", {**ITEM, "id": True}),
    ("status-code-null", {**ITEM, "status_code": None}),
    ("guid-a-number", {**ITEM, "guid": 5}),
    ("delivered-at-not-a-date", {**ITEM, "delivered_at": "yesterday"}),
    ("delivered-at-without-zone", {**ITEM, "delivered_at": "2019-06-03T00:57:16"}),
    ("redelivery-a-string", {**ITEM, "redelivery": "false"}),
    ("action-a-number", {**ITEM, "action": 3}),
    ("delivered-at-null", {**ITEM, "delivered_at": None}),
    ("delivered-at-a-number", {**ITEM, "delivered_at": 1559523436}),
    ("status-code-a-float", {**ITEM, "status_code": 200.0}),
]


@pytest.mark.parametrize(
    "item",
    [{**ITEM, "action": None}, {k: v for k, v in ITEM.items() if k != "action"}],
    ids=["action-null", "no-action"],
)
def test_an_item_without_an_action_parses(item: Any) -> None:
    """A ping delivery has no action; GitHub sends null or leaves it out."""
    assert parse_attempt(item).action is None


@pytest.mark.parametrize("item", [b[1] for b in BAD_ITEMS], ids=[b[0] for b in BAD_ITEMS])
def test_a_malformed_item_is_refused(item: Any) -> None:
    with pytest.raises(BadItem):
        parse_attempt(item)


def test_reading_stops_at_a_page_that_reaches_back_past_since() -> None:
    page = [a(3, "g3", 130, 202), a(2, "g2", 90, 202)]
    assert read_enough(page, 100)
    assert not read_enough(page, 80)
    assert not read_enough([], 80)
