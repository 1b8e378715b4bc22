"""GitHub's own ``workflow_job`` examples through the webhook handler, and the fake's own
deliveries against GitHub's webhook schemas.

Every example payload of ``@octokit/webhooks-examples`` is signed and posted to the
receiver; each must be taken (202) and have its documented effect on the index:
``queued`` adds a job (as ``waiting`` when GitHub says its status is ``waiting``: an
environment holds it), ``waiting`` holds one, ``in_progress`` starts one on the named
runner, ``completed`` closes one and keeps its conclusion, runner and attempt.

Tolerated deviation, listed: example #0 (``in_progress``) is older than the schema and
lacks ``created_at`` and ``run_attempt``; the handler takes it (GitHub has sent it) with
``created_at`` = ``started_at`` and attempt 1 (``webhooks.py`` says why).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.app.served import WebhookServer
from autoscaler.domain import JobStatus
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.webhook_index import Outcome
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.observe.github.webhooks import sign
from tests.adapters.webhook_support import ListedSource, fresh_metrics, hook_config
from tests.conformance.test_webhook_references import OLDER_THAN_THE_SCHEMA
from tests.conformance.webhooks import WebhookExamples, WebhookSchemas
from tests.unit.webhook_payloads import SECRET

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
#: The example that lacks what the schema now requires: what the handler fills in.
TOLERATED = {0: {"created_at": "started_at", "run_attempt": 1}}


def _source() -> tuple[WebhookSource, WebhookReceiver]:
    metrics = fresh_metrics()
    receiver = WebhookReceiver(hook_config(), metrics, clock=lambda: NOW)
    source = WebhookSource(ListedSource(), receiver, hook_config(), metrics, poll_interval=60)
    source.observe(NOW)
    return source, receiver


def _post(receiver: WebhookReceiver, example: dict[str, Any]) -> int:
    raw = json.dumps(example).encode()
    headers = {
        "x-github-event": "workflow_job",
        "x-github-delivery": str(uuid.uuid4()),
        "x-hub-signature-256": sign(SECRET, raw),
        "content-type": "application/json",
    }
    return receiver.handle(headers, raw).status


def test_the_tolerated_example_is_the_one_the_references_list() -> None:
    assert set(TOLERATED) == set(OLDER_THAN_THE_SCHEMA)


def test_every_workflow_job_example_has_its_documented_effect(
    webhook_examples: WebhookExamples,
) -> None:
    examples = webhook_examples.examples("workflow_job")
    assert len(examples) >= 8
    for index, example in enumerate(examples):
        source, receiver = _source()
        assert _post(receiver, example) == 202, index
        source.observe(NOW + timedelta(seconds=1))
        item, action = example["workflow_job"], example["action"]
        job = source.index.get(item["id"])
        if action == "completed":
            assert job is None, index
            done = source.index.completion(item["id"])
            assert done is not None, index
            assert (done.conclusion, done.runner_name, done.run_attempt) == (
                item["conclusion"],
                item["runner_name"],
                item["run_attempt"],
            )
            continue
        assert job is not None, index
        assert job.status is JobStatus(item["status"]), index  # queued+waiting -> WAITING
        assert job.labels == frozenset(label.lower() for label in item["labels"])
        assert (job.run_id, job.repo) == (item["run_id"], example["repository"]["name"])
        created = item.get("created_at") or item["started_at"]
        assert job.created_at == datetime.fromisoformat(created.replace("Z", "+00:00"))
        if index in TOLERATED:
            assert "created_at" not in item and job.created_at == job.started_at
        if action == "in_progress":
            assert job.runner_name == item["runner_name"]
            assert source.index.busy_runners() == {item["runner_name"]: item["id"]}
        else:
            assert job.started_at is None  # GitHub's started_at on a queued job means nothing


def test_all_examples_in_a_row_follow_the_ordering_rules(
    webhook_examples: WebhookExamples,
) -> None:
    """The examples reuse job 289782451: completed (twice), then in_progress and queued
    from a 2021 delivery. Completed first, so the later ones cannot bring it back."""
    source, receiver = _source()
    examples = webhook_examples.examples("workflow_job")
    for example in examples:
        assert _post(receiver, example) == 202
    deliveries = receiver.drain()
    outcomes = [source.index.apply(d.event, NOW).value for d in deliveries]
    by_job: dict[int, list[tuple[str, str]]] = {}
    for example, outcome in zip(examples, outcomes, strict=True):
        by_job.setdefault(example["workflow_job"]["id"], []).append((example["action"], outcome))
    assert by_job[289782451] == [
        ("completed", Outcome.ACCEPTED.value),
        ("completed", Outcome.DUPLICATE.value),
        ("in_progress", Outcome.STALE.value),
        ("queued", Outcome.STALE.value),
    ]
    assert source.index.get(289782451) is None
    assert source.index.get(12877621891) is not None  # queued (waiting), then waiting


def test_the_fakes_deliveries_validate_against_githubs_schemas(
    webhook_schemas: WebhookSchemas,
) -> None:
    """A job's whole life in the fake (waiting, queued, in_progress, completed), delivered
    signed to the real listener: each payload validates and each is taken."""
    metrics = fresh_metrics()
    receiver = WebhookReceiver(hook_config(), metrics)
    server = WebhookServer(receiver, metrics, "127.0.0.1", 0)
    server.start()
    github = FakeGitHub(owner="octo-org")
    github.start()
    try:
        sender = github.send_webhooks(f"http://127.0.0.1:{server.port}/github/webhook", SECRET)
        runner = github.register_runner("ci-cpu-i-0abc12345", ["self-hosted", "linux.4xlarge"])
        held = github.queue_job("pytorch", ["self-hosted", "linux.4xlarge"], status="waiting")
        github.set_job_status(held, "queued")
        github.assign_job(held, runner)
        github.complete_job(held)
        assert sender.wait_idle()
        sender.close()
    finally:
        github.stop()
        server.stop()
    assert [p["action"] for p in sender.payloads] == [
        "waiting",
        "queued",
        "in_progress",
        "completed",
    ]
    for payload in sender.payloads:
        assert webhook_schemas.errors("workflow_job", payload) == [], payload["action"]
    assert [s.status for s in sender.sent] == [202, 202, 202, 202]
    assert [d.event.action for d in receiver.drain()] == [
        "waiting",
        "queued",
        "in_progress",
        "completed",
    ]


@pytest.mark.parametrize("owner_kind", ["org", "user"])
def test_the_fakes_payload_validates_for_both_owner_kinds(
    webhook_schemas: WebhookSchemas, owner_kind: str
) -> None:
    from autoscaler.fakes.github_webhooks import workflow_job_payload  # noqa: PLC0415

    github = FakeGitHub(owner="octo", owner_kind=owner_kind)
    github.url = "http://127.0.0.1:1"
    job = github.queue_job("app", ["self-hosted"])
    payload = workflow_job_payload(github, job, "queued")
    assert webhook_schemas.errors("workflow_job", payload) == []
    assert ("organization" in payload) is (owner_kind == "org")
