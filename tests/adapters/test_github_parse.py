"""GitHub JSON -> domain values: what the parser accepts, and what it skips."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from msgspec import Struct

from autoscaler.domain import JobStatus
from autoscaler.observe.github.parse import (
    BadItem,
    BadPage,
    JitConfigAnswer,
    JobItem,
    PayloadError,
    RegistrationTokenAnswer,
    RunProgressAnswer,
    Skips,
    compact_page,
    model,
    parse_job,
    read,
)
from autoscaler.observe.github.records import Interner, PageRecord, RunRef
from autoscaler.telemetry import Metrics

RUN = RunRef(7, "app", completed=False)


def _job(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": 1,
        "status": "queued",
        "labels": ["self-hosted", "linux.4xlarge"],
        "created_at": "2026-11-30T03:00:00Z",
        "started_at": "2026-11-30T03:00:00Z",
        "steps": [],
    }
    body.update(fields)
    return body


def test_a_job_without_created_at_counts_from_started_at() -> None:
    """Regression: GitHub's own example of "List jobs for a workflow run" (and answers of
    that age) carries no ``created_at``. The parser required it, so such a queued job was
    skipped as malformed: never counted, never scaled for. Its ``started_at``, which GitHub
    sets when it queues the job, stands in."""
    body = _job(started_at="2026-11-30T02:50:00Z")
    del body["created_at"]
    job = parse_job(body, RUN)
    assert job is not None
    assert job.status is JobStatus.QUEUED
    assert job.created_at == datetime(2026, 11, 30, 2, 50, tzinfo=UTC)
    assert job.started_at is None  # a queued job has not started, whatever GitHub says


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"created_at": None}, id="null-created-at"),
        pytest.param({"created_at": "yesterday"}, id="not-iso-8601"),
        pytest.param({"labels": "self-hosted"}, id="labels-not-a-list"),
    ],
)
def test_a_malformed_job_is_a_bad_item(fields: dict[str, Any]) -> None:
    """A null ``created_at`` is no older shape: the description makes it required and not
    nullable, so it is malformed like any other wrong type."""
    with pytest.raises(BadItem):
        parse_job(_job(**fields), RUN)


def test_a_job_without_any_timestamp_is_a_bad_item() -> None:
    body = _job()
    del body["created_at"], body["started_at"]
    with pytest.raises(BadItem):
        parse_job(body, RUN)


# --- decoding edge cases: a page of bytes through compact_page, as the poll reads it

GOOD = _job(id=2)
UNSET = object()


def _jobs_page(*jobs: dict[str, Any], **page: Any) -> bytes:
    return json.dumps({"total_count": len(jobs), "jobs": list(jobs), **page}).encode()


def _with(**fields: Any) -> dict[str, Any]:
    body = _job(status="in_progress", runner_name="r-1", name="build")
    for name, value in fields.items():
        if value is UNSET:
            del body[name]
        else:
            body[name] = value
    return body


def _read(content: bytes, kind: str = "jobs") -> PageRecord:
    return compact_page(kind, content, Skips(Metrics()), Interner(), repo="app", run=RUN)


SKIPPED = [
    pytest.param(_with(id=UNSET), id="missing-id"),
    pytest.param(_with(status=UNSET), id="missing-status"),
    pytest.param(_with(labels=UNSET), id="missing-labels"),
    pytest.param(_with(id="1"), id="id-a-string"),
    pytest.param(_with(id=1.0), id="id-a-float"),
    pytest.param(_with(id=True), id="id-a-bool"),
    pytest.param(_with(id=None), id="id-null"),
    pytest.param(_with(labels=[1]), id="labels-of-numbers"),
    pytest.param(_with(name=7), id="name-a-number"),
    pytest.param(_with(steps={}), id="steps-an-object"),
    pytest.param(_with(created_at=None), id="created-at-null"),
    pytest.param(_with(created_at=1764471600), id="created-at-a-number"),
    pytest.param(_with(created_at="yesterday"), id="created-at-not-a-time"),
    pytest.param(_with(created_at="2026-11-30"), id="created-at-a-date-only"),
    pytest.param(_with(created_at="2026-13-30T03:00:00Z"), id="created-at-month-13"),
    pytest.param(_with(created_at="0001-01-01T00:00:00Z"), id="created-at-year-one"),
    pytest.param(_with(started_at="3001-01-01T00:00:00Z"), id="started-at-year-3001"),
    pytest.param(_with(created_at=UNSET, started_at=None), id="no-created-at-nor-started-at"),
    pytest.param(_with(run_attempt=0), id="run-attempt-zero"),
    pytest.param(_with(run_attempt="2"), id="run-attempt-a-string"),
]


@pytest.mark.parametrize("bad", SKIPPED)
def test_a_bad_job_on_a_page_is_skipped_and_counted_and_the_rest_is_read(
    bad: dict[str, Any],
) -> None:
    """The page fails to decode whole; read item by item, the good job is kept."""
    record = _read(_jobs_page(GOOD, bad))
    assert [job.id for job in record.items] == [2]
    assert record.skips == (("job", 1),)
    assert record.total_count == 2


T = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
KEPT = [
    pytest.param(_with(), {}, id="documented-shape"),
    pytest.param(_with(extra={"a": [1, {"b": None}]}, head_sha="x"), {}, id="extra-fields"),
    pytest.param(_with(name=None), {"name": ""}, id="name-null"),
    pytest.param(_with(runner_name=None), {"runner_name": None}, id="runner-name-null"),
    pytest.param(_with(started_at=None), {"started_at": None}, id="started-at-null"),
    pytest.param(_with(steps=None), {"has_steps": False}, id="steps-null"),
    pytest.param(_with(steps=[{"conclusion": None}]), {"has_steps": True}, id="step-null"),
    pytest.param(_with(conclusion=None, completed_at=None), {}, id="conclusion-null"),
    pytest.param(_with(run_id=None), {"run_id": 7}, id="run-id-null"),
    pytest.param(_with(run_attempt=None), {}, id="run-attempt-null"),
    pytest.param(_with(created_at="2026-11-30T03:00:00"), {"created_at": T}, id="no-zone-is-utc"),
    pytest.param(
        _with(created_at="2026-11-30T05:00:00+02:00"), {"created_at": T}, id="offset-to-utc"
    ),
    pytest.param(
        _with(created_at=UNSET, started_at="2026-11-30T03:00:00Z"),
        {"created_at": T, "started_at": T},
        id="no-created-at-takes-started-at",
    ),
]


@pytest.mark.parametrize(("item", "expected"), KEPT)
def test_a_job_github_may_send_is_read(item: dict[str, Any], expected: dict[str, Any]) -> None:
    record = _read(_jobs_page(item))
    [job] = record.items
    assert record.skips == ()
    assert job.created_at.tzinfo is UTC
    assert job.created_at == expected.get("created_at", T)
    for name, value in expected.items():
        assert getattr(job, name) == value


BAD_PAGES = [
    pytest.param(b"", id="empty"),
    pytest.param(b'{"jobs": [', id="truncated"),
    pytest.param(b"\xff\xfe", id="not-utf-8"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="too-deep"),
    pytest.param(b"[]", id="a-list"),
    pytest.param(b'{"total_count": 0}', id="no-jobs"),
    pytest.param(b'{"jobs": {}}', id="jobs-an-object"),
    pytest.param(b'{"jobs": null}', id="jobs-null"),
    pytest.param(b'{"total_count": "1", "jobs": []}', id="total-count-a-string"),
    pytest.param(b'{"total_count": true, "jobs": []}', id="total-count-a-bool"),
]


@pytest.mark.parametrize("content", BAD_PAGES)
def test_a_body_that_is_not_the_page_is_a_bad_page(content: bytes) -> None:
    with pytest.raises(BadPage) as caught:
        _read(content)
    assert caught.value.kind == "malformed"


def test_a_null_total_count_reads_as_none() -> None:
    assert _read(_jobs_page(GOOD, total_count=None)).total_count is None


RUNNER = {"id": 1, "name": "r-1", "status": "online", "busy": False, "labels": [{"name": "gpu"}]}
OTHER_PAGES = [
    pytest.param("runners", "runners", {**RUNNER, "busy": None}, id="runner-busy-null"),
    pytest.param("runners", "runners", {**RUNNER, "labels": ["gpu"]}, id="runner-label-a-string"),
    pytest.param("runners", "runners", {**RUNNER, "labels": [{}]}, id="runner-label-no-name"),
    pytest.param("runs", "workflow_runs", {"id": 1, "status": "queued"}, id="run-no-created-at"),
    pytest.param(
        "runs",
        "workflow_runs",
        {"id": 1, "status": "queued", "created_at": "0999-01-01T00:00:00Z"},
        id="run-year-999",
    ),
]


@pytest.mark.parametrize(("kind", "key", "bad"), OTHER_PAGES)
def test_a_bad_runner_or_run_is_skipped_and_counted(
    kind: str, key: str, bad: dict[str, Any]
) -> None:
    good = (
        RUNNER
        if kind == "runners"
        else {"id": 2, "status": "queued", "created_at": "2026-11-30T03:00:00Z"}
    )
    record = _read(json.dumps({key: [good, bad]}).encode(), kind)
    assert len(record.items) == 1
    assert record.skips == ((kind.rstrip("s"), 1),)


ANSWERS = [
    pytest.param(
        JitConfigAnswer,
        b'{"runner": {"id": 1}, "encoded_jit_config": ""}',
        BadItem,
        id="jit-empty-config",
    ),
    pytest.param(
        JitConfigAnswer,
        b'{"runner": {}, "encoded_jit_config": "x"}',
        BadItem,
        id="jit-no-runner-id",
    ),
    pytest.param(JitConfigAnswer, b"<html>502</html>", BadPage, id="jit-not-json"),
    pytest.param(RegistrationTokenAnswer, b'{"token": "t"}', BadItem, id="token-no-expiry"),
    pytest.param(
        RegistrationTokenAnswer,
        b'{"token": "t", "expires_at": null}',
        BadItem,
        id="token-expiry-null",
    ),
    pytest.param(RunProgressAnswer, b'{"status": "queued"}', BadItem, id="run-no-attempt"),
    pytest.param(
        RunProgressAnswer, b'{"status": "queued", "run_attempt": 0}', BadItem, id="run-attempt-0"
    ),
    pytest.param(
        RunProgressAnswer,
        b'{"status": "queued", "run_attempt": true}',
        BadItem,
        id="run-attempt-a-bool",
    ),
    pytest.param(
        RegistrationTokenAnswer,
        b'{"token": "", "expires_at": "2026-11-30T04:00:00Z"}',
        BadItem,
        id="token-empty",
    ),
]


@pytest.mark.parametrize(("kind", "content", "error"), ANSWERS)
def test_a_bad_answer_is_a_payload_error(
    kind: type[Struct], content: bytes, error: type[PayloadError]
) -> None:
    with pytest.raises(error):
        read(kind, content)


def test_a_registration_token_answer_is_read_in_utc() -> None:
    answer = read(
        RegistrationTokenAnswer,
        b'{"token": "t", "expires_at": "2026-11-30T05:00:00+02:00", "extra": 1}',
    )
    assert answer.expires_at == T and answer.expires_at.tzinfo is UTC


@pytest.mark.parametrize("item", [_with(), _with(id=True), _with(created_at="yesterday")])
def test_plain_json_values_and_bytes_are_read_alike(item: dict[str, Any]) -> None:
    """history and the completed-jobs reader hand decoded JSON to model(); the poll hands
    bytes: both give the same model, or both refuse the item."""
    from_bytes: Any
    try:
        from_bytes = read(JobItem, json.dumps(item).encode())
    except BadItem:
        from_bytes = BadItem
    try:
        from_values: Any = model(JobItem, item)
    except BadItem:
        from_values = BadItem
    assert from_values == from_bytes
