"""The fake GitHub's failed jobs, their annotations and job re-runs, as GitHub documents.

- :func:`fail_job`: a job completes with ``conclusion`` ``failure`` (or another), its last
  step failed or not, and the check-run annotations GitHub would have written (a lost
  runner, a shutdown signal, ``Process completed with exit code N.``).
- ``GET /repos/{o}/{r}/check-runs/{job_id}/annotations`` (a job's id is its check run's
  id): the job's annotations, a bare JSON array paginated by ``Link`` like any listing.
- ``POST /repos/{o}/{r}/actions/jobs/{job_id}/rerun``: "Re-run a job and its dependent
  jobs in a workflow run": 201 with an empty object. As on GitHub, the run gets a new
  attempt (``run_attempt`` + 1) holding a new, queued job of the same name and labels;
  the jobs listing with ``filter=latest`` (what the poll asks) shows the latest attempt's
  jobs, ``filter=all`` every attempt's. Re-running a job that is not the latest attempt of
  its name, or of a run still in progress, answers 403 as GitHub does ("This job cannot
  be rerun").
- ``POST /repos/{o}/{r}/actions/runs/{run_id}/rerun-failed-jobs``: "Re-run all of the
  failed jobs and their dependent jobs in a workflow run": 201 with an empty object, and
  one new attempt holding a new, queued job for each latest job that concluded
  ``failure``, ``timed_out`` or ``cancelled``; the others keep their results (they stay
  the latest of their name). The fake has no ``needs``, so no dependents. A run still in
  progress answers 403 as GitHub does ("This workflow is already running"); so does a run
  with nothing to re-run (GitHub does not document that case; the fake refuses it as
  GitHub refuses a run it cannot re-run, "This workflow run cannot be retried").

:func:`refuse_reruns` makes every re-run of either kind answer 403 (the token lacks
Actions: write) or 422 (as for a re-run GitHub refuses as a request).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from autoscaler.fakes.github_records import FakeJob
from autoscaler.fakes.github_shapes import Reply, error_reply
from autoscaler.fakes.github_state import GitHubState

RERUN = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/jobs/(\d+)/rerun$")
RERUN_FAILED = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runs/(\d+)/rerun-failed-jobs$")
ANNOTATIONS = re.compile(r"^/repos/([^/]+)/([^/]+)/check-runs/(\d+)/annotations$")

LOST = (
    "The self-hosted runner: {runner} lost communication with the server. Verify the "
    "machine is running and has a healthy network connection. Anything in your workflow "
    "that terminates the runner process, starves it for CPU/Memory, or blocks its network "
    "access can cause this error."
)
SHUTDOWN = (
    "The runner has received a shutdown signal. This can happen when the runner service is "
    "stopped, or a manually started runner is canceled."
)
EXIT = "Process completed with exit code {code}."
_FORBIDDEN = "Resource not accessible by integration"
_CANNOT = "This job cannot be rerun"
_ALREADY = "This job has already been re-run"
_RUNNING = "This workflow is already running"
_NOT_RETRYABLE = "This workflow run cannot be retried"
#: Conclusions ``rerun-failed-jobs`` brings back.
RERUN_CONCLUSIONS = frozenset({"failure", "timed_out", "cancelled"})


def annotation(message: str, level: str = "failure", title: str = "") -> dict[str, Any]:
    """One check annotation as GitHub lists it (a runner's: on ``.github``, line 1)."""
    return {
        "path": ".github",
        "blob_href": "",
        "start_line": 1,
        "end_line": 1,
        "start_column": None,
        "end_column": None,
        "annotation_level": level,
        "title": title,
        "message": message,
        "raw_details": "",
    }


def fail_job(
    fake: GitHubState,
    job_id: int,
    *,
    annotations: Sequence[dict[str, Any]] = (),
    failed_step: bool = True,
    conclusion: str = "failure",
) -> None:
    """The job completes with ``conclusion``; its runner (if any) is idle again."""
    with fake.lock:
        fake.complete_job(job_id)
        job = fake._jobs[job_id]
        job.conclusion = conclusion
        job.failed_step = failed_step and job.runner_name is not None
        job.annotations = [dict(a) for a in annotations]


def refuse_reruns(fake: GitHubState, status: int | None) -> None:
    """Answer every re-run (of a job or of a run's failed jobs) with ``status`` (403: no
    permission; 422), or None: as GitHub."""
    with fake.lock:
        fake.rerun_refusal = status


def latest_jobs(fake: GitHubState, job_ids: Sequence[int]) -> list[FakeJob]:
    """``filter=latest``: every job not re-run since (a re-run's new job stands in)."""
    jobs = [fake._jobs[j] for j in job_ids]
    replaced = {j.rerun_of for j in jobs if j.rerun_of is not None}
    return [j for j in jobs if j.id not in replaced]


def annotations_of(fake: GitHubState, owner: str, repo: str, job_id: int) -> list[Any] | None:
    """The job's annotations, or None for a 404. Call with ``fake.lock`` held."""
    job = fake._jobs.get(job_id)
    if owner.lower() != fake.owner.lower() or job is None or job.repo != repo:
        return None
    return list(job.annotations)


def rerun(fake: GitHubState, owner: str, repo: str, job_id: int, now: datetime) -> Reply:
    """``POST .../actions/jobs/{job_id}/rerun``. Call with ``fake.lock`` held."""
    job = fake._jobs.get(job_id)
    if owner.lower() != fake.owner.lower() or job is None or job.repo != repo:
        return error_reply(404, "Not Found")
    refusal = fake.rerun_refusal
    if refusal == 403:
        return error_reply(403, _FORBIDDEN)
    if refusal is not None:
        return error_reply(refusal, _ALREADY)
    run = fake._runs[job.run_id]
    latest = latest_jobs(fake, run.job_ids)
    if job not in latest or fake.derived_status(run) != "completed":  # not the newest
        return error_reply(403, _CANNOT)
    run.attempt += 1
    run.reported_status, run.conclusion = None, None
    _again(fake, job, run.attempt, now)
    fake.reruns.append((repo, job_id))
    return Reply(201, {})


def _again(fake: GitHubState, job: FakeJob, attempt: int, now: datetime) -> FakeJob:
    """A new, queued job of the same name and labels in the run's new attempt (its
    ``queued`` webhook goes out, as GitHub's does)."""
    new = FakeJob(
        fake._new_id(),
        job.run_id,
        job.repo,
        job.name,
        job.labels,
        now,
        "queued",
        run_attempt=attempt,
        rerun_of=job.id,
    )
    fake._jobs[new.id] = new
    fake._runs[job.run_id].job_ids.append(new.id)
    fake.changes += 1
    fake._emit(new.id, "queued")
    return new


def rerun_failed(fake: GitHubState, owner: str, repo: str, run_id: int, now: datetime) -> Reply:
    """``POST .../actions/runs/{run_id}/rerun-failed-jobs``. Call with ``fake.lock`` held."""
    run = fake._runs.get(run_id)
    if owner.lower() != fake.owner.lower() or run is None or run.repo != repo:
        return error_reply(404, "Not Found")
    refusal = fake.rerun_refusal
    if refusal == 403:
        return error_reply(403, _FORBIDDEN)
    if refusal is not None:
        return error_reply(refusal, _ALREADY)
    if fake.derived_status(run) != "completed":
        return error_reply(403, _RUNNING)
    again = [
        j
        for j in latest_jobs(fake, run.job_ids)
        if (j.conclusion or "success") in RERUN_CONCLUSIONS
    ]
    if not again:
        return error_reply(403, _NOT_RETRYABLE)
    run.attempt += 1
    run.reported_status, run.conclusion = None, None
    for job in again:
        _again(fake, job, run.attempt, now)
    fake.run_reruns.append((repo, run_id))
    return Reply(201, {})
