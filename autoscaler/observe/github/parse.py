"""GitHub's JSON as declared models: REST listing items and webhook bodies, one set.

Shapes as documented for REST API 2022-11-28 and the ``workflow_job`` webhook: a job
carries ``id``, ``run_id``, ``status``, ``labels`` (list of str), ``created_at``,
``started_at``, ``steps``, ``runner_name`` (and, once completed, ``conclusion``,
``completed_at``, ``run_attempt``); a run ``id``, ``status``, ``created_at``; a runner
``id``, ``name``, ``status`` (online/offline), ``busy`` and ``labels`` (objects with a
``name``); a repository ``name`` and ``archived``; a webhook delivery log's attempt
(``hook-delivery-item``); the runner registration answers. The same :class:`JobItem`
reads a jobs listing's items and a webhook's ``workflow_job``.

Strict where it matters: an ``id`` is an integer (not a string, a float or a bool), a
timestamp is an RFC 3339 string (not a number) within years 2000-2999 (year 1 is bad
data, not a job 2,000 years in the queue; a time without a zone is UTC). Fields we do not
read are ignored; ``null`` is accepted where GitHub documents it (a job's ``name``,
``started_at``, ``runner_name``, ``conclusion``...). Tolerance, and why: GitHub's own
examples of the jobs listing and of the ``in_progress`` webhook predate ``created_at``
and ``run_attempt``: a missing ``created_at`` takes ``started_at`` (the queue time then
reads 0), a missing ``run_attempt`` reads 1; a ``created_at`` that is present but null is
malformed.

The models are ``msgspec.Struct`` models decoded straight from the body's bytes by reused
typed decoders, picked by ``bench/github_payloads.py`` (CPU per item against the
hand-written checks they replaced; pydantic was measured and rejected there). A page is
decoded whole; when that fails, item by item, so one bad item is skipped
(:class:`BadItem`, counted by :class:`Skips`) and never costs the page. A body that is not
the documented page raises :class:`BadPage` (the caller skips the page or fails the poll).

Errors are one tree (:class:`PayloadError`), typed by what went wrong, never by message;
msgspec's errors are translated here, at the edge. Messages name fields, never quote the
body.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, Protocol, TypeVar

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

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


def _utc(value: datetime, field: str) -> datetime:
    """``value`` in UTC (a time without a zone is UTC). Raises ValueError on an
    implausible year (msgspec reports it as the item's validation error)."""
    if value.tzinfo is not UTC:
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if not _YEARS[0] <= value.year <= _YEARS[1]:
        raise ValueError(f"{field}: year {value.year} is not plausible")
    return value


# gc=False: items hold only strings, numbers, times and other items (no cycles), so the
# collector need not track the tens of thousands a cold tick decodes.


class RepoItem(Struct, gc=False):
    name: str
    archived: bool | None = None


class RunItem(Struct, gc=False):
    id: int
    status: str
    created_at: datetime

    def __post_init__(self) -> None:
        self.created_at = _utc(self.created_at, "created_at")


class RunProgressAnswer(Struct, gc=False):
    """One run (``GET .../actions/runs/{id}``): where it is, and which attempt."""

    status: str
    run_attempt: Annotated[int, Meta(ge=1)]


class LabelItem(Struct, gc=False):
    name: str


class RunnerItem(Struct, gc=False):
    id: int
    name: str
    status: str
    busy: bool
    labels: list[LabelItem]


class StepItem(Struct, gc=False):
    conclusion: str | None = None


class JobItem(Struct, gc=False):
    """A job, from a jobs listing or a ``workflow_job`` webhook."""

    id: int
    status: str
    labels: list[str]
    run_id: int | None = None
    name: str | None = None
    created_at: datetime | UnsetType | None = UNSET
    started_at: datetime | None = None
    completed_at: datetime | None = None
    steps: list[StepItem] | None = None
    runner_name: str | None = None
    conclusion: str | None = None
    run_attempt: Annotated[int, Meta(ge=1)] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.created_at, datetime):
            self.created_at = _utc(self.created_at, "created_at")
        if self.started_at is not None:
            self.started_at = _utc(self.started_at, "started_at")
        if self.completed_at is not None:
            self.completed_at = _utc(self.completed_at, "completed_at")

    @property
    def created(self) -> datetime:
        """``created_at``, or ``started_at`` when the answer predates the field."""
        if self.created_at is UNSET:
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


class Repository(Struct, gc=False):
    name: str


class WorkflowJobBody(Struct, gc=False):
    """A ``workflow_job`` webhook delivery (the fields we read)."""

    action: str
    workflow_job: JobItem
    repository: Repository


class _JitRunner(Struct, gc=False):
    id: int


class JitConfigAnswer(Struct, gc=False):
    """``generate-jitconfig``'s 201: the runner it created and its single-use config."""

    runner: _JitRunner
    encoded_jit_config: Annotated[str, Meta(min_length=1)]


class RegistrationTokenAnswer(Struct, gc=False):
    """``registration-token``'s 201: a token that can only register runners, and its end."""

    token: Annotated[str, Meta(min_length=1)]
    expires_at: datetime

    def __post_init__(self) -> None:
        self.expires_at = _utc(self.expires_at, "expires_at")


class HookDeliveryItem(Struct, gc=False):
    """One attempt in a webhook's delivery log (``hook-delivery-item``): the fields the
    redelivery decisions read. ``delivered_at`` must carry its zone."""

    id: int
    guid: str
    delivered_at: datetime
    redelivery: bool
    status_code: int
    event: str
    action: str | None = None

    def __post_init__(self) -> None:
        if self.delivered_at.tzinfo is None:
            raise ValueError("delivered_at: no time zone")


S = TypeVar("S", bound=Struct)


def _pages(key: str | None, item: type[Struct]) -> tuple[msgspec.json.Decoder[Any], ...]:
    """A listing's two decoders: the whole page typed (the fast path when every item is
    good), and the page with its items left raw (to decode them one by one)."""
    if key is None:
        return msgspec.json.Decoder(list[item]), msgspec.json.Decoder(list[Raw])  # type: ignore[valid-type]
    return tuple(
        msgspec.json.Decoder(
            msgspec.defstruct(
                f"{key}_page",
                [(key, list[of]), ("total_count", int | None, None)],  # type: ignore[valid-type]
                gc=False,
            )
        )
        for of in (item, Raw)
    )


#: Per listing: the wrapper key (``None``: a bare JSON array), the item model, and its
#: page decoders (typed, raw).
_LISTINGS: dict[str, tuple[str | None, type[Struct], tuple[msgspec.json.Decoder[Any], ...]]] = {
    "repos": (None, RepoItem, _pages(None, RepoItem)),
    "repositories": ("repositories", RepoItem, _pages("repositories", RepoItem)),
    "runs": ("workflow_runs", RunItem, _pages("workflow_runs", RunItem)),
    "jobs": ("jobs", JobItem, _pages("jobs", JobItem)),
    "runners": ("runners", RunnerItem, _pages("runners", RunnerItem)),
    "hook_deliveries": (None, HookDeliveryItem, _pages(None, HookDeliveryItem)),
}
#: ``/installation/repositories`` wraps repositories; the owner listings do not.
INSTALLATION_KEY = "repositories"


def decode(content: bytes) -> Any:
    """The body as plain JSON values. Raises BadPage (truncated, too deep, not UTF-8)."""
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        raise BadPage("the body is not JSON (truncated?)") from None


@cache
def _decoder(kind: type[S]) -> msgspec.json.Decoder[S]:
    return msgspec.json.Decoder(kind)


def read(kind: type[S], content: bytes) -> S:
    """A body decoded as ``kind``. Raises BadPage (not JSON), BadItem (not the shape)."""
    decoder: msgspec.json.Decoder[S] = _decoder(kind)
    try:
        return decoder.decode(content)
    except msgspec.ValidationError as exc:
        raise BadItem(str(exc)) from None
    except (msgspec.DecodeError, RecursionError):
        raise BadPage("the body is not JSON (truncated?)") from None


def items(content: bytes, listing: str) -> tuple[list[Struct | BadItem], int | None]:
    """One page's items as models (a bad one as its BadItem), and its ``total_count``.
    ``listing`` is a key of the listing table (``repos``, ``repositories``, ``runs``,
    ``jobs``, ``runners``, ``hook_deliveries``). Raises BadPage when the page is not the
    documented shape."""
    key, model_type, (typed, raw) = _LISTINGS[listing]
    try:
        valid = typed.decode(content)
    except msgspec.ValidationError:
        pass  # a bad item, or a bad page: told apart below
    except (msgspec.DecodeError, RecursionError):
        raise BadPage("the body is not JSON (truncated?)") from None
    else:
        if key is None:
            return valid, None
        return getattr(valid, key), valid.total_count
    try:
        page = raw.decode(content)
    except msgspec.ValidationError as exc:
        raise BadPage(f"not the documented page ({exc})") from None
    chunk, total = (page, None) if key is None else (getattr(page, key), page.total_count)
    decoder = _decoder(model_type)
    out: list[Struct | BadItem] = []
    for item in chunk:
        try:
            out.append(decoder.decode(item))
        except msgspec.ValidationError as exc:
            out.append(BadItem(str(exc)))
    return out, total


def model(kind: type[S], item: Any) -> S:
    """``item`` (a model already, or plain JSON values) as ``kind``. Raises BadItem."""
    if isinstance(item, kind):
        return item
    try:
        return msgspec.convert(item, kind)
    except msgspec.ValidationError as exc:
        raise BadItem(str(exc)) from None


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
