"""The delivery watch over a hand-written log: windows, redeliveries, caps, clocks."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from autoscaler.errors import TransientError
from autoscaler.observe.github.delivery_log import Attempt
from autoscaler.observe.github.delivery_reader import LogRead
from autoscaler.observe.github.delivery_watch import MAX_TRIES, DeliveryWatch
from tests.adapters.webhook_support import fresh_metrics

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@dataclass
class Log:
    """A delivery log: attempts newest first as GitHub lists them; redeliveries asked."""

    attempts: list[Attempt] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)
    fail_redeliver: bool = False

    def add(self, guid: str, at: datetime, code: int, *, again: bool = False) -> Attempt:
        attempt = Attempt(len(self.attempts) + 1, guid, at.timestamp(), again, code, "workflow_job")
        self.attempts.append(attempt)
        return attempt

    def read(self, since: float | None, deadline: float | None = None) -> LogRead:
        newest_first = sorted(self.attempts, key=lambda a: -a.id)
        return LogRead(attempts=newest_first, complete=True, pages=1)

    def redeliver(self, delivery_id: int, deadline: float | None = None) -> None:
        if self.fail_redeliver:
            raise TransientError("GitHub POST: 502 after 3 attempts", code="502")
        self.asked.append(delivery_id)


def watch(log: Log, max_redeliveries: int = 100) -> DeliveryWatch:
    return DeliveryWatch(
        log, fresh_metrics(), first_window=300.0, max_redeliveries=max_redeliveries
    )


def test_the_first_read_judges_no_window_then_a_quiet_one_is_clean() -> None:
    log = Log()
    log.add("g1", NOW - timedelta(seconds=10), 202)
    w = watch(log)
    assert w.check(NOW) is False  # nothing to compare with yet
    log.add("g2", NOW + timedelta(seconds=200), 202)
    assert w.check(NOW + timedelta(seconds=300)) is True


def test_githubs_clock_behind_ours_opens_no_gap() -> None:
    """Regression: the next read went back to *our* time of the previous read; with
    GitHub's clock 10 minutes behind, a delivery that failed between the two reads had a
    ``delivered_at`` older than that, was never judged, and the window passed as clean.
    The log's own newest ``delivered_at`` is the horizon now."""
    behind = timedelta(minutes=10)
    log = Log()
    log.add("g1", NOW - behind, 202)
    w = watch(log)
    w.check(NOW)
    log.add("g2", NOW - behind + timedelta(seconds=100), 502)  # lost between the reads
    assert w.check(NOW + timedelta(seconds=300)) is False
    assert log.asked == [2]


def test_a_follower_judges_but_never_redelivers_and_its_windows_stay_unclean() -> None:
    log = Log()
    w = watch(log)
    w.check(NOW)
    log.add("g1", NOW + timedelta(seconds=10), 502)
    assert w.check(NOW + timedelta(seconds=300), redeliver=False) is False
    assert log.asked == []
    assert w.check(NOW + timedelta(seconds=600), redeliver=False) is False  # still lost


def test_a_failed_redelivery_request_is_tried_at_the_next_read() -> None:
    log = Log(fail_redeliver=True)
    w = watch(log)
    w.check(NOW)
    log.add("g1", NOW + timedelta(seconds=10), 503)
    assert w.check(NOW + timedelta(seconds=300)) is False
    log.fail_redeliver = False
    assert w.check(NOW + timedelta(seconds=600)) is False
    assert log.asked == [1]
    value = w.metrics.registry.get_sample_value(
        "ci_autoscaler_webhook_redeliveries_total", {"result": "error"}
    )
    assert value == 1


def test_an_event_that_keeps_failing_is_given_up_after_max_tries() -> None:
    log = Log()
    w = watch(log)
    w.check(NOW)
    at = NOW
    log.add("g1", at + timedelta(seconds=10), 502)
    for _ in range(MAX_TRIES + 2):
        at += timedelta(seconds=300)
        w.check(at)
        log.add("g1", at + timedelta(seconds=5), 502, again=True)  # our redelivery failed
    assert len(log.asked) == MAX_TRIES
    gave_up = w.metrics.registry.get_sample_value(
        "ci_autoscaler_webhook_redeliveries_total", {"result": "gave_up"}
    )
    assert gave_up == 2


def test_over_the_cap_the_rest_are_redelivered_at_the_next_read() -> None:
    log = Log()
    w = watch(log, max_redeliveries=2)
    w.check(NOW)
    for i in range(3):
        log.add(f"g{i}", NOW + timedelta(seconds=10 + i), 502)
    w.check(NOW + timedelta(seconds=300))
    assert log.asked == [1, 2]
    w.check(NOW + timedelta(seconds=600))
    assert log.asked == [1, 2, 3]


def test_a_refused_delivery_is_judged_once_even_beside_postponed_ones() -> None:
    """Regression: with redeliveries over the cap, every failed event not redelivered was
    kept for the next read, the refused (401) ones too: they were counted and logged as
    permanent again at every reconcile and kept every window unclean."""
    log = Log()
    w = watch(log, max_redeliveries=1)
    w.check(NOW)
    log.add("g1", NOW + timedelta(seconds=10), 502)
    log.add("g2", NOW + timedelta(seconds=11), 502)
    log.add("g3", NOW + timedelta(seconds=12), 401)
    w.check(NOW + timedelta(seconds=300))
    w.check(NOW + timedelta(seconds=600))
    assert log.asked == [1, 2]
    permanent = w.metrics.registry.get_sample_value(
        "ci_autoscaler_webhook_redeliveries_total", {"result": "permanent"}
    )
    assert permanent == 1
    log.add("g4", NOW + timedelta(seconds=700), 202)
    assert w.check(NOW + timedelta(seconds=900)) is True


def test_a_postponed_event_is_redelivered_even_when_newer_attempts_moved_the_horizon() -> None:
    """Regression: the next read went back only to the newest attempt seen minus the
    margin, so a failed event postponed (over the cap) or whose redelivery request failed
    fell out of the window when later deliveries were logged, and was never redelivered.
    The next read now goes back to the oldest event still waiting."""
    log = Log()
    w = watch(log, max_redeliveries=1)
    w.check(NOW)
    log.add("g1", NOW + timedelta(seconds=10), 502)
    log.add("g2", NOW + timedelta(seconds=11), 502)
    log.add("g3", NOW + timedelta(seconds=250), 202)  # the horizon moves past both
    w.check(NOW + timedelta(seconds=300))
    w.check(NOW + timedelta(seconds=600))
    assert log.asked == [1, 2]
