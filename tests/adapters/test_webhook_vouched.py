"""Vouched webhook reconciles against the real fake GitHub: a run is listed when its bound
is up, not because an hour came round.

With ``webhook.hook_id`` the delivery log shows whether every delivery GitHub attempted
arrived. When it does, the reconcile lists the runner list, and the jobs only of the runs
:func:`~autoscaler.observe.github.reconcile_plan.trusted_reason` names; once an hour the
runs listings too. What the log cannot show is a delivery GitHub never attempted: each
test here withholds some and checks when the controller finds what they would have said.

Deliveries are built by the fake (``workflow_job_payload``, as it sends them) and handed
to the real receiver; the delivery log is a hand-written one that shows every window
clean (nothing attempted failed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.domain import JobStatus
from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_webhooks import workflow_job_payload
from autoscaler.observe.github.delivery_watch import DeliveryWatch
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.telemetry import Metrics
from tests.adapters.webhook_support import (
    corrections,
    fresh_metrics,
    github_poll,
    headers,
    hook_config,
)
from tests.unit.test_delivery_watch import Log

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ["self-hosted", "linux.4xlarge"]
FIVE = timedelta(minutes=5)


@dataclass
class World:
    """The fake GitHub, a webhook source with a clean delivery log, a moving clock."""

    fake: FakeGitHub
    metrics: Metrics = field(default_factory=fresh_metrics)
    now: datetime = T0
    log: Log = field(default_factory=Log)
    source: WebhookSource | None = None
    receiver: WebhookReceiver | None = None
    seen: dict[int, JobStatus] = field(default_factory=dict)

    def start(self) -> None:
        poll = github_poll(self.fake, self.metrics, lambda: self.now)
        hook = hook_config(reconcile_interval=FIVE.total_seconds(), hook_id=1)
        watch = DeliveryWatch(self.log, self.metrics, first_window=FIVE.total_seconds())
        self.receiver = WebhookReceiver(hook, self.metrics, clock=lambda: self.now)
        self.source = WebhookSource(
            poll, self.receiver, hook, self.metrics, poll_interval=60.0, deliveries=watch
        )
        self.fake.register_runner("r-1", CPU)
        self.fake.queue_job("app", CPU, name="seed")  # a repository to list
        self.tick()  # the start reconcile: the full poll

    def deliver(self, job_id: int, action: str) -> None:
        assert self.receiver is not None
        raw = json.dumps(workflow_job_payload(self.fake, job_id, action)).encode()
        assert self.receiver.handle(headers(raw), raw).status == 202
        self.log.add(f"d-{job_id}-{action}", self.now, 202)

    def tick(self) -> None:
        """One reconcile, five minutes after the last, deliveries flowing."""
        assert self.source is not None
        self.log.add(f"beat-{self.now.timestamp()}", self.now, 202)
        self.source.index.last_event_at = self.now  # deliveries arrive: not silent
        self.seen = {j.id: j.status for j in self.source.observe(self.now).jobs}

    def minutes(self, count: int) -> None:
        """Reconciles every five minutes for ``count`` minutes."""
        for _ in range(count // 5):
            self.now += FIVE
            self.tick()

    def job_listings(self, run_id: int) -> int:
        with self.fake.lock:
            return sum(1 for r in self.fake.requests if f"/runs/{run_id}/jobs" in r.path)


@pytest.fixture
def world() -> Iterator[World]:
    holder: list[World] = []
    with FakeGitHub(clock=lambda: holder[0].now) as fake:
        holder.append(World(fake))
        holder[0].start()
        yield holder[0]


def test_a_run_whose_every_delivery_arrived_is_never_listed(world: World) -> None:
    """The saving: a run that starts and ends within the hour, every delivery received,
    costs no job listing, not even at the hourly runs listing."""
    world.minutes(5)
    job = world.fake.queue_job("app", CPU, name="short")
    run_id = world.fake.job(job).run_id
    world.deliver(job, "queued")
    world.minutes(10)
    assert world.seen[job] is JobStatus.QUEUED
    world.fake.assign_job(job, world.fake.register_runner("r-2", CPU))
    world.deliver(job, "in_progress")
    world.minutes(20)
    world.fake.complete_job(job)
    world.deliver(job, "completed")
    world.minutes(60)  # past the hourly runs listing
    assert job not in world.seen
    assert world.job_listings(run_id) == 0


def test_a_job_github_never_sent_is_found_when_its_runs_hour_is_up(world: World) -> None:
    """b2's ``queued`` delivery was never attempted (the log cannot show it); b1 of the
    same run was delivered. The run is listed an hour after GitHub created it, not
    before, and b2 is counted as missed then."""
    world.minutes(5)
    b1 = world.fake.queue_job("app", CPU, name="b1")
    run_id = world.fake.job(b1).run_id
    b2 = world.fake.queue_job("app", CPU, name="b2", run_id=run_id)
    world.deliver(b1, "queued")
    missed = corrections(world.metrics, "missed")
    world.minutes(55)
    assert b2 not in world.seen
    assert world.job_listings(run_id) == 0
    world.minutes(5)  # the run is an hour old
    assert world.seen[b2] is JobStatus.QUEUED
    assert corrections(world.metrics, "missed") == missed + 1
    assert world.job_listings(run_id) == 1
    world.minutes(30)
    assert world.job_listings(run_id) == 1  # next due an hour after that listing


def test_a_run_github_never_told_of_is_found_at_the_hourly_runs_listing(world: World) -> None:
    """No delivery of run C was ever attempted: the hourly runs listing shows a live run
    the index knows nothing of, and its jobs are listed then."""
    world.minutes(5)
    c1 = world.fake.queue_job("app", CPU, name="c1")
    world.minutes(50)
    assert c1 not in world.seen
    world.minutes(5)  # an hour since the start reconcile's runs listings
    assert world.seen[c1] is JobStatus.QUEUED


def test_a_job_whose_completed_never_came_is_dropped_with_its_run(world: World) -> None:
    """d1 was queued (delivered) and completed (never delivered): the index holds it queued,
    demand that is not there, until the hourly runs listing no longer shows its run."""
    world.minutes(5)
    d1 = world.fake.queue_job("app", CPU, name="d1")
    world.deliver(d1, "queued")
    world.minutes(5)
    world.fake.complete_job(d1)
    gone = corrections(world.metrics, "gone")
    world.minutes(45)
    assert world.seen[d1] is JobStatus.QUEUED
    world.minutes(5)  # the hourly runs listing
    assert d1 not in world.seen
    assert corrections(world.metrics, "gone") == gone + 1


def test_a_job_hidden_behind_its_runs_ended_jobs_waits_for_the_runs_listing(
    world: World,
) -> None:
    """The bound's worst case, documented in the README: e2's delivery never came, and
    e1, the run's only job the controller knew, ended after one hourly runs listing and
    before the run's hour was up. The run is then not listed at its hour (everything
    known of it ended); the next hourly runs listing shows it still live and lists its
    jobs (``hidden``): e2 waited an hour and a half unseen, not one."""
    world.minutes(30)
    e1 = world.fake.queue_job("app", CPU, name="e1")
    run_id = world.fake.job(e1).run_id
    e2 = world.fake.queue_job("app", CPU, name="e2", run_id=run_id)
    world.deliver(e1, "queued")
    world.minutes(30)  # the hourly runs listing: e1 is live, the run 30 minutes old
    assert e2 not in world.seen
    world.minutes(10)
    world.fake.complete_job(e1)
    world.deliver(e1, "completed")
    world.minutes(45)  # the run is past its hour, but nothing known of it is live
    assert e2 not in world.seen
    assert world.job_listings(run_id) == 0
    world.minutes(5)  # the next hourly runs listing
    assert world.seen[e2] is JobStatus.QUEUED
    assert world.job_listings(run_id) == 1


def test_a_job_hidden_behind_ended_jobs_is_found_at_once_by_a_runs_listing(
    world: World,
) -> None:
    """f2's delivery never came and f1, the only job known, ended before the hourly runs
    listing: that listing shows the run live with nothing live known, and lists it."""
    world.minutes(30)
    f1 = world.fake.queue_job("app", CPU, name="f1")
    run_id = world.fake.job(f1).run_id
    f2 = world.fake.queue_job("app", CPU, name="f2", run_id=run_id)
    world.deliver(f1, "queued")
    world.minutes(10)
    world.fake.complete_job(f1)
    world.deliver(f1, "completed")
    world.minutes(20)  # the hourly runs listing
    assert world.seen[f2] is JobStatus.QUEUED
    assert world.job_listings(run_id) == 1


def test_the_choice_waits_for_a_repository_list_that_comes_in_last(world: World) -> None:
    """Regression: a vouched reconcile chooses the runs to list once the runner list and
    the repository list are in. When the repository list (due again at most reconciles)
    came in after the runner list, nothing asked again, and no run was ever listed: g2,
    whose delivery never came, stayed unseen past its run's hour. The repository list is
    held back here so it always comes in last."""

    def repos_last(method: str, path: str, status: int) -> bool:
        if path.startswith("/orgs/demo-org/repos"):
            time.sleep(0.3)  # the runner list's answer is handled first
        return False  # the reply is sent

    world.fake.before_reply = repos_last
    world.minutes(5)
    g1 = world.fake.queue_job("app", CPU, name="g1")
    run_id = world.fake.job(g1).run_id
    g2 = world.fake.queue_job("app", CPU, name="g2", run_id=run_id)
    world.deliver(g1, "queued")
    world.minutes(60)
    assert world.seen[g2] is JobStatus.QUEUED
    with world.fake.lock:
        repo_lists = sum(
            1 for r in world.fake.requests if r.path.startswith("/orgs/demo-org/repos")
        )
    assert repo_lists > 2  # it was due at vouched reconciles, not only at the first
