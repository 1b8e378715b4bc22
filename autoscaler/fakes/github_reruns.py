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
  be rerun"); :func:`refuse_reruns` makes every re-run answer 403 (the token lacks
  Actions: write) or 422 (as for a job already re-run).
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
    """Answer every re-run with ``status`` (403: no permission; 422), or None: as GitHub."""
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
    new = FakeJob(
        fake._new_id(),
        run.id,
        run.repo,
        job.name,
        job.labels,
        now,
        "queued",
        run_attempt=run.attempt,
        rerun_of=job.id,
    )
    fake._jobs[new.id] = new
    run.job_ids.append(new.id)
    fake.changes += 1
    fake.reruns.append((repo, job_id))
    return Reply(201, {})
