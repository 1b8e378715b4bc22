"""GitHub's ``workflow_job`` webhook examples and schemas, ready for the webhook handler.

The handler does not exist yet (the webhook issue adds it). When it lands, its test feeds
it every payload of ``webhook_examples.examples("workflow_job")``, signed, and checks the
documented effect of each action; the fake's own deliveries are checked with
``webhook_schemas.errors("workflow_job", payload)``. These tests keep those helpers honest:
the loader finds every action, and the validator accepts GitHub's payloads and rejects
broken ones.
"""

from __future__ import annotations

import copy

import pytest

from tests.conformance.webhooks import WORKFLOW_JOB_ACTIONS, WebhookExamples, WebhookSchemas

#: Example index -> why GitHub's own payload breaks GitHub's own schema. Each is an older
#: delivery than the schema: a handler must still take it (GitHub has sent it).
OLDER_THAN_THE_SCHEMA = {
    0: (
        "an in_progress delivery from before workflow_job gained run_attempt, created_at, "
        "workflow_name and head_branch, and repository gained is_template, topics, "
        "visibility, custom_properties and web_commit_signoff_required"
    ),
}


def test_the_loader_finds_every_workflow_job_action(webhook_examples: WebhookExamples) -> None:
    examples = webhook_examples.examples("workflow_job")
    assert webhook_examples.actions("workflow_job") == WORKFLOW_JOB_ACTIONS
    assert {example["action"] for example in examples} == WORKFLOW_JOB_ACTIONS
    for example in examples:
        job = example["workflow_job"]
        assert isinstance(job["id"], int)
        assert isinstance(job["labels"], list)


def test_each_workflow_job_example_validates_but_the_listed_older_ones(
    webhook_examples: WebhookExamples, webhook_schemas: WebhookSchemas
) -> None:
    invalid = {}
    for index, example in enumerate(webhook_examples.examples("workflow_job")):
        found = webhook_schemas.errors("workflow_job", example)
        if found:
            invalid[index] = found
    assert set(invalid) == set(OLDER_THAN_THE_SCHEMA), invalid


DROP = object()
#: id, where (a key of the payload, or "" for the payload), property, new value, the error.
BROKEN = [
    ("lacks-labels", "workflow_job", "labels", DROP, "'labels' is a required property"),
    ("extra-property", "", "unknown", 1, "'unknown' was unexpected"),
    ("bad-status", "workflow_job", "status", "done", "'done' is not one of"),
    ("bad-time", "workflow_job", "created_at", "now", "'now' is not a 'date-time'"),
]


@pytest.mark.parametrize(
    ("where", "name", "value", "expected"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN]
)
def test_a_broken_delivery_fails_its_schema(
    webhook_examples: WebhookExamples,
    webhook_schemas: WebhookSchemas,
    where: str,
    name: str,
    value: object,
    expected: str,
) -> None:
    """What the fake's deliveries will be held to: required, closed, enums, formats."""
    queued = next(
        e
        for i, e in enumerate(webhook_examples.examples("workflow_job"))
        if e["action"] == "queued" and i not in OLDER_THAN_THE_SCHEMA
    )
    payload = copy.deepcopy(queued)
    assert webhook_schemas.errors("workflow_job", payload) == []
    target = payload[where] if where else payload
    if value is DROP:
        del target[name]
    else:
        target[name] = value
    assert any(expected in error for error in webhook_schemas.errors("workflow_job", payload))


def test_an_unknown_action_is_refused_by_name(webhook_schemas: WebhookSchemas) -> None:
    with pytest.raises(KeyError, match=r"workflow_job\$exploded"):
        webhook_schemas.errors("workflow_job", {"action": "exploded"})
