"""Pure: a GitHub webhook delivery -> verified bytes -> a typed ``workflow_job`` event.

Order matters and is the point of this module: :func:`verify_signature` runs on the raw
body *before* anything parses it (an unsigned body is never even decoded), with a
constant-time compare, so a forger learns nothing from timing and a parser bug is never
reachable without the secret. :func:`parse_workflow_job` then turns the signed body into
a :class:`WorkflowJobEvent` whose ``job`` is the same :class:`~autoscaler.domain.Job` the
poll builds, so the index feeds the queue math unchanged.

Parse errors are typed (:class:`PayloadError` and its kinds), never told apart by message.

Tolerance, and why: GitHub's own ``in_progress`` example (``@octokit/webhooks-examples``
#0) predates ``created_at`` and ``run_attempt``. Like the poll (``parse.parse_job``) a
missing ``created_at`` takes ``started_at`` (the job's queue time then reads 0), and a
missing ``run_attempt`` reads 1. A *present* but malformed field is an error.

No I/O, no vendor imports.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from autoscaler.domain import Job, JobStatus, normalize_labels

#: The header GitHub signs deliveries in: ``sha256=<hex HMAC-SHA256 of the raw body>``.
SIGNATURE_HEADER = "x-hub-signature-256"
#: The actions GitHub documents for ``workflow_job`` (webhook events and payloads).
ACTIONS = ("queued", "waiting", "in_progress", "completed")
#: How far along a job is, per action: an event never moves a job back. ``queued`` and
#: ``waiting`` share a rank: GitHub sends ``queued`` with ``status: waiting`` for a job
#: held by an environment's protection rule, then ``waiting``; either may come first.
RANK = {"queued": 0, "waiting": 0, "in_progress": 1, "completed": 2}
_STATUSES = {s.value: s for s in JobStatus}
_PREFIX = "sha256="
#: Timestamps outside these years are bad data (as in the poll's parser).
_YEARS = (2000, 2999)


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body`` (the fake signs so)."""
    return _PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """True when ``header`` is GitHub's signature of exactly ``body`` under ``secret``.

    Constant-time: :func:`hmac.compare_digest` over the whole expected value, so the time
    taken does not depend on how many leading characters a forgery got right. An empty
    secret verifies nothing (a misconfigured listener must not accept everyone)."""
    if not secret or header is None:
        return False
    expected = sign(secret, body).encode("ascii")
    try:
        given = header.strip().encode("ascii")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(expected, given)


class PayloadError(Exception):
    """A signed body that is not a ``workflow_job`` delivery we understand.

    ``kind`` is a bounded label for metrics and logs; the message never quotes the body."""

    kind = "invalid"


class MalformedPayload(PayloadError):
    """Not JSON, truncated, not an object, or nested too deep."""

    kind = "malformed"


class WrongType(PayloadError):
    """A field is missing or has the wrong type (``id`` a string, ``labels`` not a list)."""

    kind = "wrong_type"


class UnknownAction(PayloadError):
    """A ``workflow_job`` action GitHub does not document (or none at all)."""

    kind = "unknown_action"


@dataclass(frozen=True, slots=True)
class WorkflowJobEvent:
    """One verified ``workflow_job`` delivery, typed.

    ``job`` is what the poll would list for it; ``conclusion``, ``completed_at`` and
    ``run_attempt`` are kept for ``completed`` events (job retry reads them from the
    index)."""

    delivery: str
    """``X-GitHub-Delivery``: GitHub's id of this delivery (a redelivery reuses it)."""
    action: str
    """One of :data:`ACTIONS`."""
    job: Job
    conclusion: str | None = None
    """``success``, ``failure``, ``cancelled``... on ``completed``; None before."""
    completed_at: datetime | None = None
    run_attempt: int = 1
    """Which attempt of the run this job belongs to (re-runs count up from 1)."""
    failed_step: bool | None = None
    """A step concluded ``failure``; None: the payload lists no steps (job retry's
    ``no_runner`` evidence needs to tell the two apart)."""

    @property
    def rank(self) -> int:
        return RANK[self.action]


def _need(obj: dict[str, Any], name: str, kind: type) -> Any:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise WrongType(f"{name}: expected {kind.__name__}")
    return value


def _optional(obj: dict[str, Any], name: str, kind: type) -> Any:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise WrongType(f"{name}: expected {kind.__name__} or null")
    return value


def _time(value: Any, name: str) -> datetime:
    if not isinstance(value, str):
        raise WrongType(f"{name}: expected a timestamp")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise WrongType(f"{name}: not ISO-8601") from None
    if not _YEARS[0] <= parsed.year <= _YEARS[1]:
        raise WrongType(f"{name}: year {parsed.year} is not plausible")
    return parsed


def decode(body: bytes) -> dict[str, Any]:
    """The body as a JSON object. Raises MalformedPayload (truncated, too deep, not UTF-8)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        raise MalformedPayload("the body is not JSON (truncated?)") from None
    if not isinstance(payload, dict):
        raise MalformedPayload("the body is not a JSON object")
    return payload


def parse_workflow_job(body: bytes, delivery: str) -> WorkflowJobEvent:
    """A verified ``workflow_job`` body -> the typed event. Raises :class:`PayloadError`."""
    payload = decode(body)
    action = payload.get("action")
    if not isinstance(action, str) or action not in RANK:
        raise UnknownAction("workflow_job: the action is missing or not documented")
    item = payload.get("workflow_job")
    if not isinstance(item, dict):
        raise WrongType("workflow_job: expected an object")
    repository = payload.get("repository")
    if not isinstance(repository, dict):
        raise WrongType("repository: expected an object")
    status = _STATUSES.get(_need(item, "status", str))
    if status is None:
        raise WrongType("workflow_job.status: not a documented status")
    labels = _need(item, "labels", list)
    if not all(isinstance(label, str) for label in labels):
        raise WrongType("workflow_job.labels: expected a list of strings")
    steps = _optional(item, "steps", list) or []
    name = _optional(item, "name", str) or ""
    created_key = "created_at" if item.get("created_at") is not None else "started_at"
    created_at = _time(item.get(created_key), f"workflow_job.{created_key}")
    started_at = None
    if status in (JobStatus.IN_PROGRESS, JobStatus.COMPLETED) and item.get("started_at"):
        started_at = _time(item["started_at"], "workflow_job.started_at")
    completed_at = None
    if status is JobStatus.COMPLETED and item.get("completed_at") is not None:
        completed_at = _time(item["completed_at"], "workflow_job.completed_at")
    attempt = _optional(item, "run_attempt", int)
    job = Job(
        id=_need(item, "id", int),
        run_id=_need(item, "run_id", int),
        repo=_need(repository, "name", str),
        name=name,
        labels=normalize_labels(labels),
        status=status,
        created_at=created_at,
        started_at=started_at,
        has_steps=bool(steps),
        runner_name=_optional(item, "runner_name", str) or None,
    )
    return WorkflowJobEvent(
        delivery=delivery,
        action=action,
        job=job,
        conclusion=_optional(item, "conclusion", str),
        completed_at=completed_at,
        run_attempt=attempt if attempt is not None else 1,
        failed_step=(
            any(isinstance(step, dict) and step.get("conclusion") == "failure" for step in steps)
            if steps
            else None
        ),
    )
