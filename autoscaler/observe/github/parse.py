"""GitHub's JSON as declared models: REST listing items and webhook bodies, one set.

Shapes as documented for REST API 2022-11-28 and the ``workflow_job`` webhook: a job
carries ``id``, ``run_id``, ``status``, ``labels`` (list of str), ``created_at``,
``started_at``, ``steps``, ``runner_name`` (and, once completed, ``conclusion``,
``completed_at``, ``run_attempt``); a run ``id``, ``status``, ``created_at``; a runner
``id``, ``name``, ``status`` (online/offline), ``busy`` and ``labels`` (objects with a
``name``); a repository ``name`` and ``archived``. The same :class:`JobItem` reads a jobs
listing's items and a webhook's ``workflow_job``.

Strict where it matters: an ``id`` is an integer (not a string, not a bool), a timestamp
is an ISO-8601 string (not a number) within years 2000-2999 (year 1 is bad data, not a
job 2,000 years in the queue; a time without a zone is UTC). Fields we do not read are
ignored. Tolerance, and why: GitHub's own examples of the jobs listing and of the
``in_progress`` webhook predate ``created_at`` and ``run_attempt``: a missing
``created_at`` takes ``started_at`` (the queue time then reads 0), a missing
``run_attempt`` reads 1; a ``created_at`` that is present but null is malformed.

The models are pydantic's, picked by ``bench/github_payloads.py`` (items per second and
CPU against msgspec and hand-written checks, side by side). A page is validated whole;
when that fails, item by item, so one bad item is skipped (:class:`BadItem`, counted by
:class:`Skips`) and never costs the page. A body that is not the documented page raises
:class:`BadPage` (the caller skips the page or fails the poll).

Errors are one tree (:class:`PayloadError`), typed by what went wrong, never by message;
messages name fields, never quote the body.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

from autoscaler.domain import Job, JobStatus, Runner, normalize_labels
from autoscaler.observe.github.records import Interner, PageRecord, RunRef

log = logging.getLogger("autoscaler.observe.github")

_JOB_STATUSES = {s.value: s for s in JobStatus}
#: Timestamps outside these years are bad data (GitHub Actions did not exist before).
_YEARS = (2000, 2999)


class PayloadError(Exception):
    """GitHub JSON that is not the documented shape. ``kind`` is a bounded label."""

    kind = "invalid"


class BadPage(PayloadError):
    """A body that is not JSON, nested too deep, or not the documented page or object."""

    kind = "malformed"


class BadItem(PayloadError):
    """One item (or a webhook's ``workflow_job``) misses a field or has a wrong type."""

    kind = "wrong_type"


class UnknownAction(PayloadError):
    """A ``workflow_job`` delivery whose action GitHub does not document (or none at all)."""

    kind = "unknown_action"


def _text(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError("expected an ISO-8601 timestamp")
    return value


def _plausible(value: datetime) -> datetime:
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if not _YEARS[0] <= value.year <= _YEARS[1]:
        raise ValueError(f"year {value.year} is not plausible")
    return value


#: A timestamp: an ISO-8601 string, UTC, within years 2000-2999.
Timestamp = Annotated[datetime, BeforeValidator(_text), AfterValidator(_plausible)]


class RepoItem(BaseModel):
    name: StrictStr
    archived: StrictBool | None = None


class RunItem(BaseModel):
    id: StrictInt
    status: StrictStr
    created_at: Timestamp


class LabelItem(BaseModel):
    name: StrictStr


class RunnerItem(BaseModel):
    id: StrictInt
    name: StrictStr
    status: StrictStr
    busy: StrictBool
    labels: list[LabelItem]


class StepItem(BaseModel):
    conclusion: StrictStr | None = None


class JobItem(BaseModel):
    """A job, from a jobs listing or a ``workflow_job`` webhook."""

    id: StrictInt
    run_id: StrictInt | None = None
    status: StrictStr
    labels: list[StrictStr]
    name: StrictStr | None = None
    created_at: Timestamp | None = None
    started_at: Timestamp | None = None
    completed_at: Timestamp | None = None
    steps: list[StepItem] | None = None
    runner_name: StrictStr | None = None
    conclusion: StrictStr | None = None
    run_attempt: Annotated[StrictInt, Field(ge=1)] | None = None

    @property
    def created(self) -> datetime:
        """``created_at``, or ``started_at`` when the answer predates the field."""
        if "created_at" not in self.model_fields_set:
            if self.started_at is None:
                raise BadItem("created_at: missing, and no started_at")
            return self.started_at
        if self.created_at is None:
            raise BadItem("created_at: null")
        return self.created_at

    @property
    def failed_step(self) -> bool | None:
        """A step concluded ``failure``; None when no steps are listed."""
        if not self.steps:
            return None
        return any(step.conclusion == "failure" for step in self.steps)


class Repository(BaseModel):
    name: StrictStr


class WorkflowJobBody(BaseModel):
    """A ``workflow_job`` webhook delivery (the fields we read)."""

    action: StrictStr
    workflow_job: JobItem
    repository: Repository


class _JitRunner(BaseModel):
    id: StrictInt


class JitConfigAnswer(BaseModel):
    """``generate-jitconfig``'s 201: the runner it created and its single-use config."""

    runner: _JitRunner
    encoded_jit_config: Annotated[StrictStr, Field(min_length=1)]


class RegistrationTokenAnswer(BaseModel):
    """``registration-token``'s 201: a token that can only register runners, and its end."""

    token: Annotated[StrictStr, Field(min_length=1)]
    expires_at: Timestamp


class _Page(BaseModel):
    total_count: StrictInt | None = None


class _Repositories(_Page):
    repositories: list[RepoItem]


class _Runs(_Page):
    workflow_runs: list[RunItem]


class _Jobs(_Page):
    jobs: list[JobItem]


class _Runners(_Page):
    runners: list[RunnerItem]


M = TypeVar("M", bound=BaseModel)

#: Per listing: the wrapper key (``None``: a bare JSON array), the item model, and the
#: whole page's validator (the fast path when every item is good).
_LISTINGS: dict[str, tuple[str | None, type[BaseModel], TypeAdapter[Any]]] = {
    "repos": (None, RepoItem, TypeAdapter(list[RepoItem])),
    "repositories": ("repositories", RepoItem, TypeAdapter(_Repositories)),
    "runs": ("workflow_runs", RunItem, TypeAdapter(_Runs)),
    "jobs": ("jobs", JobItem, TypeAdapter(_Jobs)),
    "runners": ("runners", RunnerItem, TypeAdapter(_Runners)),
}
#: ``/installation/repositories`` wraps repositories; the owner listings do not.
INSTALLATION_KEY = "repositories"


def why(error: ValidationError) -> str:
    """The first problem of a validation error: where and what, never the value."""
    first = error.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


def decode(content: bytes) -> Any:
    """The body as JSON. Raises BadPage (truncated, too deep, not UTF-8)."""
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        raise BadPage("the body is not JSON (truncated?)") from None


def items(content: bytes, listing: str) -> tuple[list[BaseModel | BadItem], int | None]:
    """One page's items as models (a bad one as its BadItem), and its ``total_count``.
    ``listing`` is a key of the listing table (``repos``, ``repositories``, ``runs``,
    ``jobs``, ``runners``). Raises BadPage when the page is not the documented shape."""
    key, model, page = _LISTINGS[listing]
    try:
        valid = page.validate_json(content)
    except ValidationError:
        pass  # a bad item, or a bad page: told apart below
    else:
        if key is None:
            return list(valid), None
        return list(getattr(valid, key)), valid.total_count
    body = decode(content)
    chunk = body if key is None else (body.get(key) if isinstance(body, dict) else None)
    if not isinstance(chunk, list):
        raise BadPage("expected a list" + (f" under {key!r}" if key else ""))
    total = body.get("total_count") if isinstance(body, dict) else None
    if total is not None and (not isinstance(total, int) or isinstance(total, bool)):
        raise BadPage("total_count is not an integer")
    out: list[BaseModel | BadItem] = []
    for item in chunk:
        try:
            out.append(model.model_validate(item))
        except ValidationError as exc:
            out.append(BadItem(why(exc)))
    return out, total


def model(kind: type[M], item: Any) -> M:
    """``item`` (a model already, or decoded JSON) as ``kind``. Raises BadItem."""
    if isinstance(item, kind):
        return item
    try:
        return kind.model_validate(item)
    except ValidationError as exc:
        raise BadItem(why(exc)) from None


def parse_repo(item: Any) -> str | None:
    """The repository's name, or None when it is archived (no workflow can run there)."""
    repo = model(RepoItem, item)
    return None if repo.archived is True else repo.name


def parse_run(item: Any, repo: str) -> RunRef:
    run = model(RunItem, item)
    status = sys.intern(run.status)
    return RunRef(run.id, repo, status == "completed", run.created_at.timestamp(), status)


def parse_job(item: Any, run: RunRef, interner: Interner | None = None) -> Job | None:
    """The job of a listing item, or None for a status we do not track (requested,
    pending). Raises BadItem."""
    job = model(JobItem, item)
    status = _JOB_STATUSES.get(job.status)
    if status is None:
        return None
    return to_job(job, status, run.id, run.repo, run.completed, interner)


def to_job(  # noqa: PLR0917
    item: JobItem,
    status: JobStatus,
    run_id: int,
    repo: str,
    run_completed: bool = False,
    interner: Interner | None = None,
) -> Job:
    """The domain's job. GitHub reports ``started_at`` on queued jobs too (=
    ``created_at``): it means nothing there."""
    interner = interner or Interner()
    started = item.started_at if status not in (JobStatus.QUEUED, JobStatus.WAITING) else None
    return Job(
        id=item.id,
        run_id=run_id,
        repo=repo,
        name=interner.text(item.name) if item.name else "",
        labels=interner.labels(normalize_labels(item.labels)),
        status=status,
        created_at=item.created,
        started_at=started,
        has_steps=bool(item.steps),
        run_completed=run_completed,
        runner_name=item.runner_name or None,
    )


def parse_runner(item: Any, interner: Interner | None = None) -> Runner:
    runner = model(RunnerItem, item)
    labels = normalize_labels([label.name for label in runner.labels])
    if interner is not None:
        labels = interner.labels(labels)
    return Runner(runner.id, runner.name, labels, runner.status == "online", runner.busy)


def merge_runners(
    repos: list[str], by_repo: Mapping[str, list[Runner]]
) -> tuple[list[Runner], dict[int, str]]:
    """One runner per id over the repositories (in order), and the repository of each."""
    runners: list[Runner] = []
    where: dict[int, str] = {}
    for repo in repos:
        for runner in by_repo.get(repo, ()):
            if runner.id not in where:
                where[runner.id] = repo
                runners.append(runner)
    return runners, where


class SkipMetrics(Protocol):
    """Where skips are counted (``autoscaler.telemetry.Metrics``; the models stay pure)."""

    @property
    def github_skipped_items(self) -> Any: ...


class Skips:
    """Counts skipped items and pages in ``github_skipped_items_total{kind}``; logs the
    first of each kind once per source (later ones are only counted)."""

    def __init__(self, metrics: SkipMetrics) -> None:
        self._metrics = metrics
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    def skip(self, kind: str, reason: str) -> None:
        self._metrics.github_skipped_items.labels(kind).inc()
        with self._lock:
            first = kind not in self._logged
            self._logged.add(kind)
        if first:
            log.warning(
                "skipping malformed GitHub %s (%s); further ones are only counted", kind, reason
            )


def compact_page(  # noqa: PLR0917
    kind: str,
    content: bytes,
    skips: Skips,
    interner: Interner,
    repo: str = "",
    run: RunRef | None = None,
    key: str | None = None,
) -> PageRecord:
    """One page's body -> its record. ``repo`` names the runs' repository, ``run`` the
    jobs' run; ``key`` is :data:`INSTALLATION_KEY` for ``/installation/repositories``.
    Raises BadPage when the page is not the shape."""
    try:
        found, total = items(content, key or kind)
    except BadPage as exc:
        raise BadPage(f"{kind}: {exc}") from None
    convert = _converters(kind, interner, repo, run)
    values: list[Any] = []
    skipped = 0
    item_kind = kind.rstrip("s")
    for item in found:
        try:
            if isinstance(item, BadItem):
                raise item
            value = convert(item)
        except BadItem as exc:
            skips.skip(item_kind, str(exc))
            skipped += 1
            continue
        if value is not None:
            values.append(value)
    return PageRecord(kind, tuple(values), total, ((item_kind, skipped),) if skipped else ())


def _converters(
    kind: str, interner: Interner, repo: str, run: RunRef | None
) -> Callable[[Any], Any]:
    if kind == "repos":
        return lambda item: None if (name := parse_repo(item)) is None else interner.text(name)
    if kind == "runs":
        return lambda item: parse_run(item, repo)
    if kind == "jobs":
        if run is None:
            raise ValueError("a jobs page needs its run")
        return lambda item: parse_job(item, run, interner)
    return lambda item: parse_runner(item, interner)
