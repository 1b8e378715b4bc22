"""Pure: a GitHub webhook delivery -> verified bytes -> a typed ``workflow_job`` event.

Order matters and is the point of this module: :func:`verify_signature` runs on the raw
body *before* anything parses it (an unsigned body is never even decoded), with a
constant-time compare, so a forger learns nothing from timing and a parser bug is never
reachable without the secret. :func:`parse_workflow_job` then turns the signed body into
a :class:`WorkflowJobEvent` whose ``job`` is the same :class:`~autoscaler.domain.Job` the
poll builds, so the index feeds the queue math unchanged.

The body is read by the same declared models as the poll's listings
(:mod:`autoscaler.observe.github.parse`, with their tolerance of GitHub's older examples);
errors are typed (:class:`~autoscaler.observe.github.parse.PayloadError` and its kinds),
never told apart by message. No I/O.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError

from autoscaler.domain import Job, JobStatus
from autoscaler.observe.github.parse import (
    BadItem,
    BadPage,
    PayloadError,
    UnknownAction,
    WorkflowJobBody,
    decode,
    to_job,
    why,
)

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


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body`` (the fake signs so)."""
    return _PREFIX + hmac.digest(secret, body, "sha256").hex()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """True when ``header`` is GitHub's signature of exactly ``body`` under ``secret``."""
    return signed_digest(secret, body, header) is not None


def signed_digest(secret: bytes, body: bytes, header: str | None) -> bytes | None:
    """The HMAC-SHA256 of ``body`` under ``secret`` when ``header`` is GitHub's signature
    of it, else None. One pass over the body: the digest also names the body (the
    receiver refuses a body it has seen), so nothing hashes it again.

    Constant-time: :func:`hmac.compare_digest` over the whole expected value, so the time
    taken does not depend on how many leading characters a forgery got right. An empty
    secret verifies nothing (a misconfigured listener must not accept everyone)."""
    if not secret or header is None:
        return None
    digest = hmac.digest(secret, body, "sha256")
    expected = (_PREFIX + digest.hex()).encode("ascii")
    try:
        given = header.strip().encode("ascii")
    except UnicodeEncodeError:
        return None
    return digest if hmac.compare_digest(expected, given) else None


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


def parse_workflow_job(body: bytes, delivery: str) -> WorkflowJobEvent:
    """A verified ``workflow_job`` body -> the typed event. Raises
    :class:`~autoscaler.observe.github.parse.PayloadError`: BadPage (not a JSON object),
    UnknownAction, BadItem (a field missing or of the wrong type)."""
    try:
        payload = WorkflowJobBody.model_validate_json(body)
    except ValidationError as exc:
        raise _what_failed(body, exc) from None
    action = payload.action
    if action not in RANK:
        raise UnknownAction("workflow_job: the action is not documented")
    item = payload.workflow_job
    status = _STATUSES.get(item.status)
    if status is None:
        raise BadItem("workflow_job.status: not a documented status")
    if item.run_id is None:
        raise BadItem("workflow_job.run_id: missing")
    job = to_job(item, status, item.run_id, payload.repository.name)
    completed_at = item.completed_at if status is JobStatus.COMPLETED else None
    return WorkflowJobEvent(
        delivery=delivery,
        action=action,
        job=job,
        conclusion=item.conclusion,
        completed_at=completed_at,
        run_attempt=item.run_attempt if item.run_attempt is not None else 1,
        failed_step=item.failed_step,
    )


def _what_failed(body: bytes, error: ValidationError) -> PayloadError:
    """The typed error of a body the model refused: malformed, unknown action, wrong type."""
    payload = decode(body)
    if not isinstance(payload, dict):
        return BadPage("the body is not a JSON object")
    action = payload.get("action")
    if not isinstance(action, str) or action not in RANK:
        return UnknownAction("workflow_job: the action is missing or not documented")
    return BadItem(why(error))
