"""The lean webhook reconcile against the real fake GitHub: cheaper, and still right.

The aim was 5x fewer rate-limited requests with webhooks than polling alone; the
reconcile was the full poll, and five minutes apart every running job's listing had
changed (its steps moved on), so each reconcile cost about three 60 s polls. It now
skips the jobs of runs whose jobs all run on runners GitHub lists busy, and of runs whose
queued jobs cannot have started unseen (every busy runner is one the index knows runs a
job). Each test here loses one kind of delivery and checks the reconcile still finds it.

Deliveries are built by the fake (``workflow_job_payload``, as it sends them) and handed
to the real receiver, so a test chooses exactly which are lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from autoscaler.domain import JobStatus
from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_webhooks import workflow_job_payload
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

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ["self-hosted", "linux.4xlarge"]


@dataclass
class Org:
    """Run A: jobs a1 and a2 running on r-1 and r-2, b1 queued; r-3 idle. Run A stays
    ``in_progress`` whatever happens to its jobs here, so its runs listing never moves:
    only the rules about its jobs can find a lost delivery."""

    fake: FakeGitHub
    metrics: Metrics = field(default_factory=fresh_metrics)
    now: datetime = T0
    runners: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    source: WebhookSource | None = None
    receiver: WebhookReceiver | None = None

    def start(self) -> WebhookSource:
        fake = self.fake
        for name in ("r-1", "r-2", "r-3"):
            self.runners[name] = fake.register_runner(name, CPU)
        a1 = fake.queue_job("app", CPU, name="a1")
        run_a = fake.job(a1).run_id
        self.jobs = {"a1": a1, "a2": fake.queue_job("app", CPU, name="a2", run_id=run_a)}
        self.jobs["b1"] = fake.queue_job("app", CPU, name="b1", run_id=run_a)
        fake.assign_job(self.jobs["a1"], self.runners["r-1"])
        fake.assign_job(self.jobs["a2"], self.runners["r-2"])
        poll = github_poll(fake, self.metrics, lambda: self.now)
        hook = hook_config(reconcile_interval=300.0)
        self.receiver = WebhookReceiver(hook, self.metrics, clock=lambda: self.now)
        self.source = WebhookSource(poll, self.receiver, hook, self.metrics, poll_interval=60.0)
        self.source.observe(self.now)  # the first reconcile: the full poll
        return self.source

    def deliver(self, job_id: int, action: str) -> None:
        assert self.receiver is not None
        raw = json.dumps(workflow_job_payload(self.fake, job_id, action)).encode()
        assert self.receiver.handle(headers(raw), raw).status == 202

    def reconcile(self) -> dict[int, JobStatus]:
        """Five minutes on (steps moved), with deliveries flowing (a queued job of a
        new run in another repository, delivered); the jobs after the reconcile."""
        assert self.source is not None
        self.now += timedelta(seconds=150)
        self.jobs["c1"] = self.fake.queue_job("other", CPU, name="c1")
        self.deliver(self.jobs["c1"], "queued")
        self.source.observe(self.now)
        self.now += timedelta(seconds=150)
        observation = self.source.observe(self.now)
        return {j.id: j.status for j in observation.jobs}

    def job_listings(self, since: int) -> list[tuple[str, int]]:
        with self.fake.lock:
            return [(r.path, r.status) for r in self.fake.requests[since:] if "/jobs" in r.path]

    def requests(self) -> int:
        with self.fake.lock:
            return len(self.fake.requests)


@pytest.fixture
def org() -> Iterator[Org]:
    holder: list[Org] = []
    with FakeGitHub(clock=lambda: holder[0].now) as fake:
        holder.append(Org(fake))
        yield holder[0]


def _rate_used(fake: FakeGitHub) -> int:
    answer = httpx.get(f"{fake.url}/rate_limit", headers={"Authorization": "token fake-token"})
    return int(answer.json()["rate"]["used"])


def test_nothing_lost_costs_no_job_listing_and_no_correction(org: Org) -> None:
    """Five minutes of step churn in run A, every delivery made: the reconcile reads the
    runs listings (most 304s, free) and the runner list, and no job listing but the new
    run's."""
    org.start()
    before, used = org.requests(), _rate_used(org.fake)
    counts = [corrections(org.metrics, k) for k in ("missed", "status", "gone")]
    seen = org.reconcile()
    c1 = org.jobs["c1"]
    listed = org.job_listings(before)
    assert [path.split("?")[0] for path, _ in listed] == [
        f"/repos/demo-org/other/actions/runs/{org.fake.job(c1).run_id}/jobs"
    ]  # the new run only
    assert seen[org.jobs["b1"]] is JobStatus.QUEUED
    assert seen[org.jobs["a1"]] is JobStatus.IN_PROGRESS
    assert seen[c1] is JobStatus.QUEUED
    assert [corrections(org.metrics, k) for k in ("missed", "status", "gone")] == counts
    with org.fake.lock:
        answered = org.fake.requests[before:]
    charged = sum(1 for r in answered if r.status != 304 and r.path != "/rate_limit")
    assert _rate_used(org.fake) - used == charged  # a 304 costs nothing, as on GitHub
    assert charged < len(answered)


def _lost_queued_in_a_new_run(org: Org) -> None:
    org.jobs["d1"] = org.fake.queue_job("app", CPU, name="d1")  # its delivery lost


def _lost_in_progress(org: Org) -> None:
    org.fake.assign_job(org.jobs["b1"], org.runners["r-3"])  # its delivery lost


def _lost_completed(org: Org) -> None:
    org.fake.complete_job(org.jobs["a1"])  # its delivery lost: r-1 idle on GitHub


def _lost_completed_runner_reused(org: Org) -> None:
    org.fake.complete_job(org.jobs["a1"])  # lost
    org.fake.assign_job(org.jobs["b1"], org.runners["r-1"])
    org.deliver(org.jobs["b1"], "in_progress")  # r-1 busy again, with b1


def _lost_queued_dependent(org: Org) -> None:
    org.fake.complete_job(org.jobs["a1"])
    org.deliver(org.jobs["a1"], "completed")
    run_a = org.fake.job(org.jobs["a2"]).run_id
    org.jobs["a3"] = org.fake.queue_job("app", CPU, name="a3", run_id=run_a)  # lost


CASES = [
    ("lost-queued-in-a-new-run", _lost_queued_in_a_new_run, "missed", {"d1": JobStatus.QUEUED}),
    ("lost-in-progress", _lost_in_progress, "status", {"b1": JobStatus.IN_PROGRESS}),
    ("lost-completed", _lost_completed, "gone", {"a1": None}),
    ("lost-completed-runner-reused", _lost_completed_runner_reused, "gone", {"a1": None}),
    ("lost-queued-of-a-dependent-job", _lost_queued_dependent, "missed", {"a3": JobStatus.QUEUED}),
]


@pytest.mark.parametrize(
    ("lose", "kind", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_lean_reconcile_finds_each_lost_delivery(
    org: Org,
    lose: Callable[[Org], None],
    kind: str,
    want: dict[str, JobStatus | None],
) -> None:
    """Each lost delivery that matters to scaling (a queued job unseen, a phantom queued
    job, a runner that looks busy) is corrected and counted by the next reconcile."""
    org.start()
    before = corrections(org.metrics, kind)  # the first reconcile "missed" every job
    lose(org)
    seen = org.reconcile()
    assert corrections(org.metrics, kind) - before == 1
    for name, status in want.items():
        assert seen.get(org.jobs[name]) is status, name
