"""Completed jobs of runs the poll saw finish, failed ones with their annotations.

The poll lists runs in every status that can hold a queued job; a run it watched that
drops out of those listings has completed (:attr:`Poll.finished`). This reader takes them
from there, so finding them costs nothing extra: per run one ``GET .../runs/{id}/jobs
?filter=latest`` (the conclusion, runner name, run attempt and steps of each job) and, per
failed job, one ``GET /repos/{o}/{r}/check-runs/{job_id}/annotations`` (a job's id is its
check run's id; the first :data:`ANNOTATIONS_PER_PAGE` are read: the runner's own
annotations come first).

Bounded: at most :data:`RUNS_PER_TICK` runs a call and :data:`RUNS_PER_HOUR` an hour
(the rest wait, oldest first, up to :data:`MAX_WAITING`; past it the oldest are dropped and
counted), and nothing while GitHub's remaining rate limit is under :data:`RESERVE` of it:
the poll that scales comes first. A run seen complete between two polls without ever
being seen running is not found here; with webhooks on, its ``completed`` events hand
its jobs to the stage (:mod:`.webhook_completions`, which asks :meth:`annotated` here).

Bad input never fails the call: a malformed job is skipped (``github_skipped_items_total
{kind="completed_job"}``), unreadable annotations leave a job's ``annotations`` None, odd
annotation items are skipped. :func:`parse_completed_job` also reads the ``workflow_job``
object of a ``workflow_job`` webhook (the same fields), for the webhook path later.
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

from autoscaler.domain import Annotation, CompletedJob, normalize_labels
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


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        raise BadPage("the body is not JSON") from None


class CompletedRuns:
    """:class:`autoscaler.job_retry.stage.CompletedJobSource` over the poll's finished runs."""

    def __init__(self, http: GitHubHttp, owner: str, finished: deque[RunRef], skips: Skips) -> None:
        self.http = http
        self.owner = owner
        """URL-quoted owner."""
        self.finished = finished
        self.skips = skips
        self._read: deque[float] = deque()
        self.dropped = 0

    def completed_jobs(self, now: datetime) -> list[CompletedJob]:
        wall = now.timestamp()
        while self._read and wall - self._read[0] >= 3600:
            self._read.popleft()
        while len(self.finished) > MAX_WAITING:
            self.finished.popleft()
            self.dropped += 1
        if not self.affordable():
            return []
        out: list[CompletedJob] = []
        for _ in range(RUNS_PER_TICK):
            if not self.finished or len(self._read) >= RUNS_PER_HOUR:
                break
            run = self.finished.popleft()
            try:
                out += self._run(run)
            except (NotFoundError, BadPage) as exc:  # deleted, or an answer too large
                log.info("completed run %s/%d skipped: %s", run.repo, run.id, exc)
                continue
            except AutoscalerError as exc:
                self.finished.appendleft(run)  # tried again next call
                log.warning(
                    "completed run %s/%d not read (%s): %s", run.repo, run.id, exc.kind, exc
                )
                break
            self._read.append(wall)
        return out

    def affordable(self) -> bool:
        """Enough of GitHub's rate limit remains for job retry's reads."""
        limits = self.http.gate.limits
        if limits.limit is None or limits.remaining is None:
            return True
        return limits.remaining >= RESERVE * limits.limit

    def _run(self, run: RunRef) -> list[CompletedJob]:
        repo = quote(run.repo, safe="")
        path = f"/repos/{self.owner}/{repo}/actions/runs/{run.id}/jobs?filter=latest&per_page=100"
        answer = self.http.send("GET", path, "completed_jobs")
        try:
            body = _json(answer.content)
        except BadPage as exc:
            self.skips.skip("completed_jobs_page", str(exc))
            return []
        items = body.get("jobs") if isinstance(body, dict) else None
        if not isinstance(items, list):
            self.skips.skip("completed_jobs_page", "no jobs list")
            return []
        jobs = list(self._parse(items, run.repo))
        return [self.annotated(j) if j.failed else j for j in jobs]

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
