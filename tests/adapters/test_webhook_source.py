"""The webhook-fed JobSource: the index between reconciles, the poll at them.

A fake inner source stands in for the GitHub poll; deliveries go through the real
receiver (signed), so each test tells what a tick would see after them.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.app.service import Wakeup
from autoscaler.domain import Job, JobStatus, Runner
from autoscaler.errors import TransientError
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.telemetry import Metrics
from tests.adapters.webhook_support import (
    ListedSource,
    corrections,
    counted,
    fresh_metrics,
    headers,
    hook_config,
)
from tests.unit.webhook_payloads import body

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
LABELS = frozenset({"self-hosted", "linux.4xlarge"})


def listed(job_id: int, status: JobStatus = JobStatus.QUEUED) -> Job:
    return Job(job_id, 10, "pytorch", f"build {job_id}", LABELS, status, T0)


def world(inner: ListedSource, **config: object) -> tuple[WebhookSource, WebhookReceiver, Metrics]:
    metrics = fresh_metrics()
    hook = hook_config(reconcile_interval=300.0, **config)
    receiver = WebhookReceiver(hook, metrics, clock=lambda: T0)
    return WebhookSource(inner, receiver, hook, metrics, poll_interval=60.0), receiver, metrics


def deliver(receiver: WebhookReceiver, action: str, job_id: int, **kwargs: object) -> int:
    raw = body(action, job_id, **kwargs)
    return receiver.handle(headers(raw), raw).status


def test_first_tick_polls_then_the_index_answers_without_a_request() -> None:
    inner = ListedSource([listed(1)])
    source, receiver, _ = world(inner)
    assert [j.id for j in source.observe(T0).jobs] == [1]
    assert deliver(receiver, "queued", 2) == 202
    seen = source.observe(T0 + timedelta(seconds=1))
    assert [j.id for j in seen.jobs] == [1, 2]
    assert inner.polls == 1  # the queued job cost GitHub nothing


def test_an_index_tick_says_its_runner_list_is_the_last_poll_s() -> None:
    """Found running `make demo`: an index tick said ``observed_at`` = now for runners read
    at the last poll, so a JIT runner registered in between looked spent and its machine
    was terminated before it booted. The tick now names when its runners were read."""
    inner = ListedSource([listed(1)])
    source, receiver, _ = world(inner)
    polled = source.observe(T0)
    assert polled.runners_seen_at == T0
    assert deliver(receiver, "queued", 2) == 202
    seen = source.observe(T0 + timedelta(seconds=5))
    assert inner.polls == 1
    assert seen.observed_at == T0 + timedelta(seconds=5)
    assert seen.runners_seen_at == T0


CADENCE = [
    ("events-flowing-no-poll", [1, 60, 120, 299], 1),
    ("interval-elapsed-polls", [1, 60, 301], 2),
    ("silent-longer-than-interval-polls-every-tick", [1, 400, 460, 520], 4),
]


@pytest.mark.parametrize(("ticks", "polls"), [c[1:] for c in CADENCE], ids=[c[0] for c in CADENCE])
def test_reconcile_cadence(ticks: list[int], polls: int) -> None:
    """Reconcile every reconcile_interval while events flow; when they stop for longer
    than it, every tick polls (as without webhooks) until they come back."""
    inner = ListedSource()
    source, receiver, _ = world(inner)
    source.observe(T0)
    for n, second in enumerate(ticks):
        if second < 300:  # events flow for the first five minutes only
            deliver(receiver, "queued", 100 + n)
        source.observe(T0 + timedelta(seconds=second))
    assert inner.polls == polls


def test_reconcile_counts_what_the_webhooks_missed() -> None:
    """Three deliveries lost: a queued (missed), an in_progress (status), a completed
    (gone). The reconcile makes the index GitHub's and counts each by kind."""
    inner = ListedSource()
    source, receiver, metrics = world(inner)
    source.observe(T0)
    deliver(receiver, "queued", 1)
    deliver(receiver, "queued", 2)
    deliver(receiver, "queued", 3)
    source.observe(T0 + timedelta(seconds=10))
    inner.jobs = [listed(2, JobStatus.IN_PROGRESS), listed(4)]  # 1 done, 2 started, 4 new
    seen = source.observe(T0 + timedelta(seconds=301))
    assert {j.id: j.status for j in seen.jobs} == {2: JobStatus.IN_PROGRESS, 4: JobStatus.QUEUED}
    assert [corrections(metrics, k) for k in ("missed", "status", "gone")] == [1, 1, 2]


def test_a_failed_reconcile_fails_the_tick_and_is_retried_a_poll_interval_later() -> None:
    inner = ListedSource()
    source, receiver, _ = world(inner)
    source.observe(T0)
    deliver(receiver, "queued", 1)
    inner.fail = TransientError("GitHub down")
    with pytest.raises(TransientError):
        source.observe(T0 + timedelta(seconds=300))
    with pytest.raises(TransientError):
        source.observe(T0 + timedelta(seconds=310))  # not asked again yet
    assert inner.polls == 2
    inner.fail = None
    deliver(receiver, "queued", 2)
    assert [j.id for j in source.observe(T0 + timedelta(seconds=361)).jobs] == []
    assert inner.polls == 3


def test_runners_busy_from_events_between_reconciles() -> None:
    idle = Runner(1, "r-i-0aaaaaaaa", LABELS, online=True, busy=False)
    busy = Runner(2, "r-i-0bbbbbbbb", LABELS, online=True, busy=True)
    inner = ListedSource([], [idle, busy])
    source, receiver, _ = world(inner)
    source.observe(T0)
    deliver(receiver, "in_progress", 7, runner_name="r-i-0aaaaaaaa")
    deliver(receiver, "completed", 8, runner_name="r-i-0bbbbbbbb", conclusion="success")
    runners = {r.name: r.busy for r in source.observe(T0 + timedelta(seconds=5)).runners}
    assert runners == {"r-i-0aaaaaaaa": True, "r-i-0bbbbbbbb": False}


def test_outcomes_are_counted_when_applied() -> None:
    inner = ListedSource()
    source, receiver, metrics = world(inner)
    source.observe(T0)
    deliver(receiver, "in_progress", 1)
    deliver(receiver, "queued", 1)  # older than what the index holds
    source.observe(T0 + timedelta(seconds=1))
    assert counted(metrics, "workflow_job", "in_progress", "accepted") == 1
    assert counted(metrics, "workflow_job", "queued", "stale") == 1
    last = metrics.registry.get_sample_value("ci_autoscaler_webhook_last_event_timestamp_seconds")
    assert last == T0.timestamp()


def test_a_burst_of_events_wakes_the_loop_once_after_the_debounce() -> None:
    """100 queued events of a matrix arrive within ~10 ms: one wake, not 100 ticks."""
    wake = Wakeup(debounce=0.2)
    stop = threading.Event()
    woken: list[float] = []
    first = time.monotonic()

    def loop() -> None:
        started = first
        while not stop.is_set() and len(woken) < 5:
            wake.wait(30.0, stop)
            woken.append(time.monotonic() - started)
            started = time.monotonic()

    thread = threading.Thread(target=loop)
    thread.start()
    for _ in range(100):
        wake.notify()
    deadline = time.monotonic() + 10
    while not woken and time.monotonic() < deadline:
        time.sleep(0.01)
    assert woken and woken[0] >= 0.2  # waited for the rest of the burst, from its first
    stop.wait(0.5)  # a window in which a second wake-up would show
    stop.set()
    thread.join(10)
    assert len(woken) <= 2  # the burst woke once; a second wait ends only by the stop
    assert all(w >= 0.4 for w in woken[1:])


def test_json_of_the_index_jobs_is_the_polls_shape() -> None:
    """What ``once --output json`` would print is unchanged: domain Jobs either way."""
    inner = ListedSource()
    source, receiver, _ = world(inner)
    source.observe(T0)
    deliver(receiver, "queued", 5)
    (job,) = source.observe(T0 + timedelta(seconds=1)).jobs
    assert isinstance(job, Job) and job.status is JobStatus.QUEUED and job.labels == LABELS
    assert json.dumps(sorted(job.labels))


def test_reaction_is_observed_when_the_jobs_type_is_scaled_up() -> None:
    """Two queued jobs of one type: the tick that scales that type up observes both
    reactions; a job of a type the tick did not scale observes nothing."""
    from autoscaler.app.webhooks import Reactions  # noqa: PLC0415
    from autoscaler.controller import TickResult  # noqa: PLC0415
    from autoscaler.domain import RunnerType  # noqa: PLC0415
    from autoscaler.scale.plan import SCALE_UP, Decision  # noqa: PLC0415

    inner = ListedSource()
    source, receiver, metrics = world(inner)
    source.observe(T0)
    deliver(receiver, "queued", 1)
    deliver(receiver, "queued", 2)
    deliver(receiver, "queued", 3, labels=("self-hosted", "gpu"))
    source.observe(T0 + timedelta(seconds=1))
    types = [RunnerType("cpu", LABELS), RunnerType("gpu", frozenset({"self-hosted", "gpu"}))]
    reactions = Reactions(source, types, metrics, clock=lambda: T0 + timedelta(seconds=0.5))
    result = TickResult(now=T0, snapshot=None)
    result.decisions = [Decision("cpu", "ci-cpu", 0, 2, "2 queued", action=SCALE_UP)]
    assert reactions.after_tick(result) == [0.5, 0.5]
    assert metrics.registry.get_sample_value("ci_autoscaler_reaction_seconds_count") == 2
    # the GPU job's event caused no capacity request: a later scale-up is not its reaction
    assert source.queued_received == {}
    result.decisions = [Decision("gpu", "ci-gpu", 0, 1, "1 queued", action=SCALE_UP)]
    assert reactions.after_tick(result) == []


def test_the_loop_is_told_when_the_reconcile_is_due() -> None:
    """A tick woken by an event 59 s before the reconcile must not push the reconcile a
    whole poll interval later: the loop wakes when it is due."""
    inner = ListedSource()
    source, receiver, _ = world(inner)
    assert source.due_in(T0) is None  # nothing reconciled yet: the poll interval rules
    source.observe(T0)
    deliver(receiver, "queued", 1)
    source.observe(T0 + timedelta(seconds=241))
    assert source.due_in(T0 + timedelta(seconds=241)) == 59.0
    assert source.due_in(T0 + timedelta(seconds=600)) is None  # silent: every tick polls
