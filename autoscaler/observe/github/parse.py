"""GitHub JSON -> domain values, strictly: a bad item raises BadItem and is skipped upstream.

Shapes as documented for REST API 2022-11-28: a job carries ``id``, ``run_id``, ``status``,
``labels`` (list of str), ``created_at``, ``started_at``, ``steps``, ``runner_name``; a
runner carries ``id``, ``name``, ``status`` (online/offline), ``busy`` and ``labels``
(objects with a ``name``). A timestamp outside years 2000-2999 (year 1, say) is bad data,
not a job 2,000 years in the queue.

:func:`compact_page` turns one page into a :class:`PageRecord`; a page that is not the
documented shape raises :class:`BadPage` (the caller skips the page or fails the poll).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from autoscaler.domain import Job, JobStatus, Runner, normalize_labels
from autoscaler.observe.github.records import Interner, PageRecord, RunRef
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")

_JOB_STATUSES = {s.value: s for s in JobStatus}


#: Timestamps outside these years are bad data (GitHub Actions did not exist before).
_YEARS = (2000, 2999)


class BadItem(Exception):
    """One item of a GitHub response is malformed."""


class BadPage(Exception):
    """A 2xx body that is not the JSON we expect (the caller decides: skip or fail)."""


class Skips:
    """Counts skipped items and pages in ``github_skipped_items_total{kind}``; logs the
    first of each kind once per source (later ones are only counted)."""

    def __init__(self, metrics: Metrics) -> None:
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


def _field(item: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(item, dict):
        raise BadItem("not an object")
    value = item.get(name)
    if isinstance(value, bool) and kind is not bool:
        raise BadItem(f"{name}: expected {kind}, got bool")
    if not isinstance(value, kind):
        raise BadItem(f"{name}: expected {getattr(kind, '__name__', kind)}")
    return value


def parse_time(value: Any, name: str) -> datetime:
    if not isinstance(value, str):
        raise BadItem(f"{name}: expected a timestamp")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise BadItem(f"{name}: not ISO-8601") from None
    if not _YEARS[0] <= parsed.year <= _YEARS[1]:
        raise BadItem(f"{name}: year {parsed.year} is not plausible")
    return parsed


def parse_repo(item: Any) -> str | None:
    """The repository's name, or None when it is archived (no workflow can run there)."""
    name = _field(item, "name", str)
    return None if item.get("archived") is True else str(name)


def parse_run(item: Any, repo: str) -> RunRef:
    run_id = _field(item, "id", int)
    status = _field(item, "status", str)
    created = parse_time(item.get("created_at"), "created_at")
    return RunRef(run_id, repo, status == "completed", created.timestamp())


def parse_job(item: Any, run: RunRef, interner: Interner | None = None) -> Job | None:
    """The job, or None for a status we do not track (requested, pending)."""
    status = _JOB_STATUSES.get(_field(item, "status", str))
    job_id = _field(item, "id", int)
    labels = _field(item, "labels", list)
    if not all(isinstance(label, str) for label in labels):
        raise BadItem("labels: expected a list of strings")
    steps = item.get("steps")
    if steps is not None and not isinstance(steps, list):
        raise BadItem("steps: expected a list")
    runner_name = item.get("runner_name")
    if runner_name is not None and not isinstance(runner_name, str):
        raise BadItem("runner_name: expected a string")
    name = item.get("name")
    # GitHub's own example of this listing has no created_at (older answers lack it): the
    # job still counts, its started_at (set when GitHub queues it) standing in. A null
    # created_at is malformed: the description makes it required and not nullable.
    created = "created_at" if "created_at" in item else "started_at"
    created_at = parse_time(item.get(created), created)
    started_at = None
    # GitHub reports started_at on queued jobs too (= created_at); it means nothing there.
    if status not in (None, JobStatus.QUEUED, JobStatus.WAITING) and item.get("started_at"):
        started_at = parse_time(item.get("started_at"), "started_at")
    if status is None:
        return None
    interner = interner or Interner()
    return Job(
        id=job_id,
        run_id=run.id,
        repo=run.repo,
        name=interner.text(name) if isinstance(name, str) else "",
        labels=interner.labels(normalize_labels(labels)),
        status=status,
        created_at=created_at,
        started_at=started_at,
        has_steps=bool(steps),
        run_completed=run.completed,
        runner_name=runner_name or None,
    )


def parse_runner(item: Any, interner: Interner | None = None) -> Runner:
    runner_id = _field(item, "id", int)
    name = _field(item, "name", str)
    status = _field(item, "status", str)
    busy = _field(item, "busy", bool)
    labels = _field(item, "labels", list)
    names = []
    for label in labels:
        label_name = label.get("name") if isinstance(label, dict) else None
        if not isinstance(label_name, str):
            raise BadItem("labels: expected objects with a name")
        names.append(label_name)
    label_set = normalize_labels(names)
    if interner is not None:
        label_set = interner.labels(label_set)
    return Runner(runner_id, name, label_set, status == "online", busy)


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


#: The wrapper key of each listing (``None``: a bare JSON array).
_KEYS = {"repos": None, "runs": "workflow_runs", "jobs": "jobs", "runners": "runners"}
#: ``/installation/repositories`` wraps repositories; the owner listings do not.
INSTALLATION_KEY = "repositories"


def compact_page(  # noqa: PLR0917
    kind: str,
    body: Any,
    skips: Skips,
    interner: Interner,
    repo: str = "",
    run: RunRef | None = None,
    key: str | None = None,
) -> PageRecord:
    """One page -> its record. ``repo`` names the runs' repository, ``run`` the jobs' run;
    ``key`` overrides the wrapper key. Raises BadPage when the page is not the shape."""
    key = key if key is not None else _KEYS[kind]
    chunk = body if key is None else (body.get(key) if isinstance(body, dict) else None)
    if not isinstance(chunk, list):
        raise BadPage(f"{kind}: expected a list" + (f" under {key!r}" if key else ""))
    total = body.get("total_count") if isinstance(body, dict) else None
    if total is not None and (not isinstance(total, int) or isinstance(total, bool)):
        raise BadPage(f"{kind}: total_count is not an integer")
    items: list[Any] = []
    skipped: dict[str, int] = {}
    item_kind = kind.rstrip("s")
    for item in chunk:
        try:
            value: Any
            if kind == "repos":
                value = parse_repo(item)
                value = None if value is None else interner.text(value)
            elif kind == "runs":
                value = parse_run(item, repo)
            elif kind == "jobs":
                assert run is not None
                value = parse_job(item, run, interner)
            else:
                value = parse_runner(item, interner)
        except BadItem as exc:
            skips.skip(item_kind, str(exc))
            skipped[item_kind] = skipped.get(item_kind, 0) + 1
            continue
        if value is not None:
            items.append(value)
    return PageRecord(kind, tuple(items), total, tuple(skipped.items()))
