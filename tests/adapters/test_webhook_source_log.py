"""The webhook source's use of the delivery log, over a hand-written log and poll."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.domain import Observation
from autoscaler.errors import TransientError
from autoscaler.observe.github.delivery_watch import DeliveryWatch
from autoscaler.observe.github.poll import Lean, ListedScope
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_source import WebhookSource
from tests.adapters.webhook_support import fresh_metrics, hook_config
from tests.unit.test_delivery_watch import Log

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
FIVE = timedelta(minutes=5)


@dataclass
class LeanPoll:
    """A LeanSource: records each reconcile's ``runs``; fails while ``fail`` is set."""

    calls: list[bool] = field(default_factory=list)
    fail: bool = False

    def observe(self, now: datetime) -> Observation:
        return self.reconcile(now, lambda *_: None, runs=True)  # type: ignore[arg-type]

    def reconcile(self, now: datetime, lean: Lean, *, runs: bool = True) -> Observation:
        self.calls.append(runs)
        if self.fail:
            raise TransientError("GitHub GET /repos/o/r/actions/runs: 502 after 3 attempts")
        return Observation(observed_at=now, jobs=(), runners=())

    def scope(self) -> ListedScope:
        return ListedScope(frozenset(), frozenset(), frozenset())

    def remove_runner(self, runner_id: int) -> None:
        """Not used here."""

    def find_runner(self, name: str) -> None:
        return None


def source(log: Log, poll: LeanPoll) -> WebhookSource:
    metrics = fresh_metrics()
    hook = hook_config(reconcile_interval=FIVE.total_seconds(), hook_id=1)
    watch = DeliveryWatch(log, metrics, first_window=FIVE.total_seconds())
    receiver = WebhookReceiver(hook, metrics)
    return WebhookSource(poll, receiver, hook, metrics, poll_interval=60.0, deliveries=watch)


def flowing(src: WebhookSource, now: datetime) -> None:
    src.index.last_event_at = now  # deliveries arrive: not silent


def test_clean_windows_list_the_runners_only_until_the_hour() -> None:
    log, poll = Log(), LeanPoll()
    src = source(log, poll)
    log.add("g0", T0 - timedelta(seconds=5), 202)
    src.observe(T0)
    now = T0
    for i in range(12):
        now += FIVE
        log.add(f"g{i + 1}", now - timedelta(seconds=30), 202)
        flowing(src, now)
        src.observe(now)
    # start: the full poll; 11 clean reconciles: runners only; the hour's: the lean one
    assert poll.calls == [True] + [False] * 11 + [True]


def test_a_failed_listing_after_a_loss_is_not_vouched_for_by_the_next_read() -> None:
    """Regression: a window with a delivery the listener refused for good (401: not
    redelivered) made the reconcile list around it; that listing failed, and the retry a
    poll interval later read a clean window (nothing since) and listed the runners only:
    the refused delivery's job was never listed. A failed reconcile now makes the next
    read vouch for nothing."""
    log, poll = Log(), LeanPoll()
    src = source(log, poll)
    log.add("g0", T0 - timedelta(seconds=5), 202)
    src.observe(T0)
    log.add("g1", T0 + FIVE - timedelta(seconds=60), 401)
    flowing(src, T0 + FIVE)
    poll.fail = True
    with pytest.raises(TransientError):
        src.observe(T0 + FIVE)
    poll.fail = False
    later = T0 + FIVE + timedelta(seconds=60)
    log.add("g2", later - timedelta(seconds=5), 202)
    flowing(src, later)
    src.observe(later)
    assert poll.calls == [True, True, True]  # the retry listed, it did not trust the log
