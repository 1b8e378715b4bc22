"""The job-retry input reads GitHub's own ``workflow_job`` ``completed`` examples: the same
:func:`parse_completed_job` that reads the jobs listing reads a webhook's ``workflow_job``
object, so the webhook path can hand its jobs to the retry stage unchanged."""

from __future__ import annotations

from autoscaler.observe.github.failures import parse_completed_job
from tests.conformance.webhooks import WebhookExamples


def test_every_completed_workflow_job_example_is_a_completed_job(
    webhook_examples: WebhookExamples,
) -> None:
    completed = [
        e for e in webhook_examples.examples("workflow_job") if e.get("action") == "completed"
    ]
    assert completed
    for example in completed:
        item = example["workflow_job"]
        job = parse_completed_job(item, example["repository"]["name"])
        assert job is not None
        assert (job.job_id, job.run_id, job.run_attempt) == (
            item["id"],
            item["run_id"],
            item["run_attempt"],
        )
        assert job.conclusion == item["conclusion"]
        assert job.runner_name == (item["runner_name"] or None)
        assert job.completed_at is not None
        assert job.annotations is None  # a webhook carries none: they are asked for


def test_other_actions_are_not_completed_jobs(webhook_examples: WebhookExamples) -> None:
    others = [e for e in webhook_examples.examples("workflow_job") if e["action"] != "completed"]
    assert others
    assert all(parse_completed_job(e["workflow_job"], "r") is None for e in others)
