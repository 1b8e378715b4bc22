"""Job retry's completed runs with webhooks on, against the fake GitHub over real HTTP.

The story: with webhooks the poll is a reconcile minutes apart. A Spot runner's job that
started and failed between two reconciles was never seen running by the poll, so job
retry (fed by the runs the poll saw finish) never judged it, and the job lost to the
interruption stayed failed. The ``completed`` delivery now has its run read whole from
GitHub (its jobs, the failed one's annotations) and handed to job retry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_reruns import LOST, annotation, fail_job
from autoscaler.fakes.github_webhooks import workflow_job_payload
from autoscaler.observe.github.webhook_completions import WebhookCompletedRuns
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.telemetry import Metrics
from tests.adapters.webhook_support import fresh_metrics, github_poll, headers, hook_config

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
GPU = ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]
RUNNER = "ci-gpu-spot-i-0abc123def4567890"


@dataclass
class World:
    fake: FakeGitHub
    now: datetime = T0
    metrics: Metrics = field(default_factory=fresh_metrics)

    def deliver(self, receiver: WebhookReceiver, job_id: int, action: str) -> None:
        raw = json.dumps(workflow_job_payload(self.fake, job_id, action)).encode()
        assert receiver.handle(headers(raw), raw).status == 202


@pytest.fixture
def world() -> Iterator[World]:
    holder: list[World] = []
    with FakeGitHub(clock=lambda: holder[0].now) as fake:
        holder.append(World(fake))
        yield holder[0]


def test_a_job_that_failed_between_two_reconciles_reaches_job_retry(world: World) -> None:
    poll = github_poll(world.fake, world.metrics, lambda: world.now)
    hook = hook_config(reconcile_interval=300.0)
    receiver = WebhookReceiver(hook, world.metrics, clock=lambda: world.now)
    source = WebhookSource(poll, receiver, hook, world.metrics, poll_interval=60.0)
    feed = WebhookCompletedRuns(source.index, poll)
    try:
        source.observe(world.now)  # the first reconcile; nothing runs yet
        runner = world.fake.register_runner(RUNNER, GPU)
        job = world.fake.queue_job("pytorch", GPU, name="test (1)")
        sibling = world.fake.queue_job(
            "pytorch", GPU, name="test (2)", run_id=world.fake.job(job).run_id
        )
        for j in (job, sibling):
            world.deliver(receiver, j, "queued")
        world.fake.assign_job(job, runner)
        world.deliver(receiver, job, "in_progress")
        fail_job(world.fake, job, annotations=[annotation(LOST.format(runner=RUNNER))])
        world.deliver(receiver, job, "completed")
        world.now += timedelta(seconds=60)
        source.observe(world.now)  # from the index: no poll saw the run
        assert poll.completed_runs(world.now) == []  # the poll alone would never judge it
        assert feed.completed_runs(world.now) == []  # the sibling is queued still
        fail_job(world.fake, sibling, conclusion="cancelled", failed_step=False)
        world.deliver(receiver, sibling, "completed")
        source.observe(world.now)
        (run,) = feed.completed_runs(world.now)
        assert (run.run_id, run.attempt) == (world.fake.job(job).run_id, 1)
        done, cancelled = run.jobs
        assert (done.job_id, done.conclusion, done.runner_name) == (job, "failure", RUNNER)
        assert done.failed_step is True
        assert done.annotations is not None
        assert "lost communication" in done.annotations[0].message
        assert (cancelled.job_id, cancelled.conclusion) == (sibling, "cancelled")
        assert feed.completed_runs(world.now + timedelta(seconds=60)) == []  # handed once
    finally:
        poll.close()
