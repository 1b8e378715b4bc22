"""The pure webhook core: signatures are checked before parsing, payloads become typed
events, and every malformed payload is a typed error (never a message to match)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from autoscaler.domain import JobStatus
from autoscaler.observe.github.parse import BadItem, BadPage, PayloadError, UnknownAction
from autoscaler.observe.github.webhooks import (
    parse_workflow_job,
    sign,
    verify_signature,
)
from tests.unit.webhook_payloads import SECRET, body, payload


def test_the_signature_is_githubs_documented_example() -> None:
    """GitHub's docs ("Validating webhook deliveries"): secret "It's a Secret to
    Everybody", payload "Hello, World!" -> this exact signature."""
    assert sign(SECRET, b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


GOOD = sign(SECRET, b"{}")
SIGNATURES = [
    ("valid", SECRET, b"{}", GOOD, True),
    ("valid-with-whitespace", SECRET, b"{}", f" {GOOD} ", True),
    ("missing", SECRET, b"{}", None, False),
    ("empty", SECRET, b"{}", "", False),
    ("other-secret", b"another", b"{}", GOOD, False),
    ("body-changed", SECRET, b"{} ", GOOD, False),
    ("sha1-prefix", SECRET, b"{}", GOOD.replace("sha256=", "sha1="), False),
    ("upper-case-hex", SECRET, b"{}", GOOD.upper(), False),
    ("truncated", SECRET, b"{}", GOOD[:-1], False),
    ("non-ascii", SECRET, b"{}", GOOD[:-1] + "\u00e9", False),
    ("empty-secret-verifies-nothing", b"", b"{}", sign(b"", b"{}"), False),
]


@pytest.mark.parametrize(
    ("secret", "raw", "header", "expected"),
    [s[1:] for s in SIGNATURES],
    ids=[s[0] for s in SIGNATURES],
)
def test_verify_signature(secret: bytes, raw: bytes, header: str | None, expected: bool) -> None:
    assert verify_signature(secret, raw, header) is expected


PARSED = [
    ("queued", body("queued", 7), "queued", JobStatus.QUEUED, None),
    ("waiting", body("waiting", 7), "waiting", JobStatus.WAITING, None),
    (
        "queued-held-by-an-environment",
        body("queued", 7, status="waiting"),
        "queued",
        JobStatus.WAITING,
        None,
    ),
    (
        "in-progress",
        body("in_progress", 7, started_at="2026-11-30T03:01:00Z", runner_name="r-i-0abc12345"),
        "in_progress",
        JobStatus.IN_PROGRESS,
        None,
    ),
    (
        "completed",
        body("completed", 7, conclusion="failure", runner_name="r-i-0abc12345"),
        "completed",
        JobStatus.COMPLETED,
        "failure",
    ),
]


@pytest.mark.parametrize(
    ("raw", "action", "status", "conclusion"), [p[1:] for p in PARSED], ids=[p[0] for p in PARSED]
)
def test_parse_workflow_job(
    raw: bytes, action: str, status: JobStatus, conclusion: str | None
) -> None:
    event = parse_workflow_job(raw, "d-1")
    assert (event.delivery, event.action, event.job.status) == ("d-1", action, status)
    assert event.job.id == 7 and event.job.run_id == 10 and event.job.repo == "pytorch"
    assert event.job.labels == frozenset({"self-hosted", "linux.4xlarge"})
    assert event.job.created_at == datetime(2026, 11, 30, 3, tzinfo=UTC)
    assert event.conclusion == conclusion and event.run_attempt == 1
    if status is JobStatus.QUEUED:
        assert event.job.started_at is None  # GitHub sets it on queued jobs; it means nothing


def test_a_missing_created_at_takes_started_at_and_a_missing_attempt_reads_one() -> None:
    """GitHub's own in_progress example (webhooks-examples #0) predates both fields."""
    data = payload("in_progress", 3, started_at="2026-11-30T03:05:00Z")
    del data["workflow_job"]["created_at"], data["workflow_job"]["run_attempt"]
    event = parse_workflow_job(json.dumps(data).encode(), "d")
    assert event.job.created_at == event.job.started_at == datetime(2026, 11, 30, 3, 5, tzinfo=UTC)
    assert event.run_attempt == 1


def _mutated(where: str, name: str, value: object) -> bytes:
    data = payload("queued", 1)
    target = data[where] if where else data
    if value is DROP:
        del target[name]
    else:
        target[name] = value
    return json.dumps(data).encode()


DROP = object()
BAD = [
    ("truncated", body("queued")[:-5], BadPage),
    ("not-json", b"\xff\xfe nope", BadPage),
    ("a-list", b"[1, 2]", BadPage),
    ("too-deep", b"[" * 100_000 + b"]" * 100_000, BadPage),
    ("no-action", _mutated("", "action", DROP), UnknownAction),
    ("unknown-action", _mutated("", "action", "exploded"), UnknownAction),
    ("action-a-number", _mutated("", "action", 3), UnknownAction),
    ("no-workflow-job", _mutated("", "workflow_job", DROP), BadItem),
    ("no-repository", _mutated("", "repository", DROP), BadItem),
    ("id-a-string", _mutated("workflow_job", "id", "1"), BadItem),
    ("id-a-bool", _mutated("workflow_job", "id", True), BadItem),
    ("labels-a-string", _mutated("workflow_job", "labels", "gpu"), BadItem),
    ("labels-of-numbers", _mutated("workflow_job", "labels", [1]), BadItem),
    ("unknown-status", _mutated("workflow_job", "status", "done"), BadItem),
    ("bad-time", _mutated("workflow_job", "created_at", "yesterday"), BadItem),
    ("year-one", _mutated("workflow_job", "created_at", "0001-01-01T00:00:00Z"), BadItem),
    ("attempt-a-string", _mutated("workflow_job", "run_attempt", "2"), BadItem),
    ("steps-an-object", _mutated("workflow_job", "steps", {}), BadItem),
]


@pytest.mark.parametrize(("raw", "error"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_payload_is_a_typed_error(raw: bytes, error: type[PayloadError]) -> None:
    with pytest.raises(error) as caught:
        parse_workflow_job(raw, "d")
    assert caught.value.kind in {"malformed", "wrong_type", "unknown_action"}
    assert "octo-org" not in str(caught.value)  # messages never quote the body
