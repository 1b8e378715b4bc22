"""Completed run attempts the poll saw finish, failed jobs with their annotations.

The poll lists runs in every status that can hold a queued job; a run it watched that
drops out of those listings has completed (:attr:`Poll.finished`). This reader takes them
from there, so finding them costs nothing extra: per run one ``GET .../runs/{id}/jobs
?filter=latest`` (the conclusion, runner name, run attempt and steps of each job: every
job of the run's latest attempt, those it did not re-run with their kept results) and,
per failed job, one ``GET /repos/{o}/{r}/check-runs/{job_id}/annotations`` (a job's id is
its check run's id; the first :data:`ANNOTATIONS_PER_PAGE` are read: the runner's own
annotations come first). Only runs with a failed or cancelled job are handed on.

Bounded: at most :data:`RUNS_PER_TICK` runs a call and :data:`RUNS_PER_HOUR` an hour
(the rest wait, oldest first, up to :data:`MAX_WAITING`; past it the oldest are dropped and
counted), and nothing while GitHub's remaining rate limit is under :data:`RESERVE` of it:
the poll that scales comes first. A run seen complete between two polls without ever
being seen running is not found here; with webhooks on, its ``completed`` events tell of
it and :mod:`.webhook_completions` has it read whole (:meth:`CompletedRuns.whole`).

Bad input never fails the call: a malformed job is skipped (``github_skipped_items_total
{kind="completed_job"}``), unreadable annotations leave a job's ``annotations`` None, odd
annotation items are skipped. :func:`parse_completed_job` also reads the ``workflow_job``
object of a ``workflow_job`` webhook (the same fields).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any
from urllib.parse import quote

from autoscaler.domain import (
    Annotation,
    CompletedJob,
    CompletedRun,
    completed_run,
    normalize_labels,
)
from autoscaler.errors import AutoscalerError, NotFoundError
from autoscaler.observe.github.http import GitHubHttp
from autoscaler.observe.github.parse import BadItem, BadPage, JobItem, Skips, model
from autoscaler.observe.github.records import RunRef

log = logging.getLogger("autoscaler.observe.github")

RUNS_PER_TICK = 20
RUNS_PER_HOUR = 600
MAX_WAITING = 2000
#: Below this share of the rate limit remaining, completed runs wait for the next window.
RESERVE = 0.2
ANNOTATIONS_PER_PAGE = 50
#: An annotation's message is kept up to this many characters.
MESSAGE_CHARS = 2000


def parse_completed_job(item: Any, repo: str) -> CompletedJob | None:
    """A completed job from a jobs-listing item or a webhook's ``workflow_job`` (decoded
    JSON, or the model already); None when it has not completed. Raises BadItem on a
    malformed one."""
    job = model(JobItem, item)
    if job.status != "completed":
        return None
    if job.run_id is None:
        raise BadItem("run_id: missing")
    return CompletedJob(
        repo=repo,
        run_id=job.run_id,
        job_id=job.id,
        name=job.name or "",
        conclusion=job.conclusion or "",
        run_attempt=job.run_attempt or 1,
        runner_name=job.runner_name or None,
        labels=normalize_labels(job.labels),
        started_at=job.started_at,
        completed_at=job.completed_at,
        failed_step=job.failed_step,
    )


def parse_annotations(body: Any) -> tuple[Annotation, ...] | None:
    """Check annotations from a listing body; None when the body is not a list. Items that
    are not objects or carry no text message are skipped."""
    if not isinstance(body, list):
        return None
    out = []
    for item in body:
        if not isinstance(item, dict) or not isinstance(item.get("message"), str):
            continue
        level = item.get("annotation_level")
        title = item.get("title")
        out.append(
            Annotation(
                level if isinstance(level, str) else "",
                item["message"][:MESSAGE_CHARS],
                title if isinstance(title, str) else "",
            )
        )
    return tuple(out)


def newer_attempt_running(run: CompletedRun) -> bool:
    """The run was re-run after it completed: a job of a newer attempt than any completed
    one is listed, not completed yet."""
    return run.attempt > max((j.run_attempt for j in run.jobs), default=0)


def _attempt_of(item: Any) -> int:
    """A listed job's ``run_attempt`` (1 when it has none, or not an integer)."""
    attempt = item.get("run_attempt") if isinstance(item, dict) else None
    return attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 1


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        raise BadPage("the body is not JSON") from None


class CompletedRuns:
    """:class:`autoscaler.job_retry.stage.CompletedRunSource` over the poll's finished runs."""

    def __init__(self, http: GitHubHttp, owner: str, finished: deque[RunRef], skips: Skips) -> None:
        self.http = http
        self.owner = owner
        """URL-quoted owner."""
        self.finished = finished
        self.skips = skips
        self._read: deque[float] = deque()
        self.dropped = 0

    def completed_runs(self, now: datetime) -> list[CompletedRun]:
        wall = now.timestamp()
        while self._read and wall - self._read[0] >= 3600:
            self._read.popleft()
        while len(self.finished) > MAX_WAITING:
            self.finished.popleft()
            self.dropped += 1
        if not self.affordable():
            return []
        out: list[CompletedRun] = []
        for _ in range(RUNS_PER_TICK):
            if not self.finished or len(self._read) >= RUNS_PER_HOUR:
                break
            ref = self.finished.popleft()
            try:
                run = self.whole(ref.repo, ref.id)
            except (NotFoundError, BadPage) as exc:  # deleted, or an answer too large
                log.info("completed run %s/%d skipped: %s", ref.repo, ref.id, exc)
                continue
            except AutoscalerError as exc:
                self.finished.appendleft(ref)  # tried again next call
                log.warning(
                    "completed run %s/%d not read (%s): %s", ref.repo, ref.id, exc.kind, exc
                )
                break
            self._read.append(wall)
            if run.of_interest and not newer_attempt_running(run):
                out.append(run)  # (a newer attempt's run is listed again: found once it ends)
        return out

    def affordable(self) -> bool:
        """Enough of GitHub's rate limit remains for job retry's reads."""
        limits = self.http.gate.limits
        if limits.limit is None or limits.remaining is None:
            return True
        return limits.remaining >= RESERVE * limits.limit

    def whole(self, repo: str, run_id: int, attempt: int | None = None) -> CompletedRun:
        """Every job of the run's latest attempt, failed ones annotated (``attempt``: the
        run's, when known; else the newest any job belongs to)."""
        path = (
            f"/repos/{self.owner}/{quote(repo, safe='')}/actions/runs/{int(run_id)}/jobs"
            "?filter=latest&per_page=100"
        )
        answer = self.http.send("GET", path, "completed_jobs")
        try:
            body = _json(answer.content)
        except BadPage as exc:
            self.skips.skip("completed_jobs_page", str(exc))
            body = None
        items = body.get("jobs") if isinstance(body, dict) else None
        if body is not None and not isinstance(items, list):
            self.skips.skip("completed_jobs_page", "no jobs list")
        listed = items if isinstance(items, list) else []
        jobs = list(self._parse(listed, repo))
        annotated = [self.annotated(j) if j.failed else j for j in jobs]
        run = completed_run(repo, run_id, annotated)
        # A job not completed yet counts too: a re-run's new attempt has only queued jobs.
        newest = max([run.attempt, attempt or 1, *map(_attempt_of, listed)])
        return replace(run, attempt=newest)

    def _parse(self, items: Iterable[Any], repo: str) -> Iterable[CompletedJob]:
        for item in items:
            try:
                job = parse_completed_job(item, repo)
            except BadItem as exc:
                self.skips.skip("completed_job", str(exc))
                continue
            if job is not None:
                yield job

    def annotated(self, job: CompletedJob) -> CompletedJob:
        """The job with its annotations (unchanged when they could not be read)."""
        repo = quote(job.repo, safe="")
        path = (
            f"/repos/{self.owner}/{repo}/check-runs/{job.job_id}/annotations"
            f"?per_page={ANNOTATIONS_PER_PAGE}"
        )
        try:
            answer = self.http.send("GET", path, "job_annotations")
            annotations = parse_annotations(_json(answer.content))
        except (AutoscalerError, BadPage) as exc:
            log.info("annotations of %s job %d not read: %s", job.repo, job.job_id, exc)
            return job
        if annotations is None:
            self.skips.skip("annotations_page", "not a list")
        return replace(job, annotations=annotations)
