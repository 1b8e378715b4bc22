"""GitHub JSON -> domain values, strictly: a bad item raises BadItem and is skipped upstream.

Shapes as documented for REST API 2022-11-28: a job carries ``id``, ``run_id``, ``status``,
``labels`` (list of str), ``created_at``, ``started_at``, ``steps``, ``runner_name``; a
runner carries ``id``, ``name``, ``status`` (online/offline), ``busy`` and ``labels``
(objects with a ``name``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from autoscaler.domain import Job, JobStatus, Runner, normalize_labels
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")

_JOB_STATUSES = {s.value: s for s in JobStatus}


class BadItem(Exception):
    """One item of a GitHub response is malformed."""


@dataclass(frozen=True)
class RunRef:
    id: int
    repo: str
    completed: bool


class Skips:
    """Counts skipped items per observation; logs the first of each kind once per source."""

    def __init__(self, metrics: Metrics, logged: set[str]) -> None:
        self._metrics = metrics
        self._logged = logged
        self._lock = threading.Lock()
        self.count = 0
        self.by_kind: dict[str, int] = {}

    def skip(self, kind: str, reason: str) -> None:
        self._metrics.github_skipped_items.labels(kind).inc()
        with self._lock:
            self.count += 1
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
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
    except ValueError:
        raise BadItem(f"{name}: not ISO-8601") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def parse_repo(item: Any) -> str | None:
    """The repository's name, or None when it is archived (no workflow can run there)."""
    name = _field(item, "name", str)
    return None if item.get("archived") is True else str(name)


def parse_run(item: Any, repo: str) -> RunRef:
    run_id = _field(item, "id", int)
    status = _field(item, "status", str)
    return RunRef(run_id, repo, status == "completed")


def parse_job(item: Any, run: RunRef) -> Job | None:
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
    return Job(
        id=job_id,
        run_id=run.id,
        repo=run.repo,
        name=name if isinstance(name, str) else "",
        labels=normalize_labels(labels),
        status=status,
        created_at=created_at,
        started_at=started_at,
        has_steps=bool(steps),
        run_completed=run.completed,
        runner_name=runner_name or None,
    )


def parse_runner(item: Any) -> Runner:
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
    return Runner(runner_id, name, normalize_labels(names), status == "online", busy)


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
