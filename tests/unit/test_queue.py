"""Runner-type matching, ghost jobs and queue time, as tables (design.md contracts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.domain import Job, JobStatus, Runner, RunnerType, normalize_labels
from autoscaler.observe.queue import (
    compute_queue,
    is_ghost,
    match_job,
    match_runner,
    queue_time_seconds,
)

NOW = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
CPU = RunnerType("linux.4xlarge", normalize_labels(["self-hosted", "linux.4xlarge"]))
GPU = RunnerType(
    "linux.g5.4xlarge.nvidia.gpu",
    normalize_labels(["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]),
)
GPU_BIG = RunnerType(
    "gpu-big", normalize_labels(["self-hosted", "linux.g5.4xlarge.nvidia.gpu", "big"])
)
TYPES = (CPU, GPU, GPU_BIG)


def job(
    labels: list[str],
    *,
    age_min: float = 10,
    status: JobStatus = JobStatus.QUEUED,
    steps: bool = False,
    run_done: bool = False,
    started_after_min: float | None = None,
    job_id: int = 1,
) -> Job:
    created = NOW - timedelta(minutes=age_min)
    started = None if started_after_min is None else created + timedelta(minutes=started_after_min)
    return Job(
        id=job_id,
        run_id=1,
        repo="org/app",
        name="build",
        labels=normalize_labels(labels),
        status=status,
        created_at=created,
        started_at=started,
        has_steps=steps,
        run_completed=run_done,
    )


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param(["self-hosted", "linux.4xlarge"], "linux.4xlarge", id="exact"),
        pytest.param(["SELF-HOSTED", "Linux.4XLarge"], "linux.4xlarge", id="case-insensitive"),
        pytest.param(["linux.4xlarge"], "linux.4xlarge", id="subset-covered"),
        pytest.param(
            ["linux.g5.4xlarge.nvidia.gpu"],
            "linux.g5.4xlarge.nvidia.gpu",
            id="tie-goes-to-fewest-extra-labels",
        ),
        pytest.param(["big"], "gpu-big", id="only-one-type-covers"),
        pytest.param(["self-hosted"], "linux.4xlarge", id="equal-extras-break-by-name"),
        pytest.param(["self-hosted", "windows"], None, id="unmatched-extra-label"),
        pytest.param(["ubuntu-latest"], None, id="unmatched-hosted-label"),
    ],
)
def test_match_job(labels: list[str], expected: str | None) -> None:
    found = match_job(normalize_labels(labels), TYPES)
    assert (found.name if found else None) == expected


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param(["self-hosted", "linux.4xlarge"], "linux.4xlarge", id="exact"),
        pytest.param(
            ["self-hosted", "linux.4xlarge", "x64", "linux"], "linux.4xlarge", id="extras"
        ),
        pytest.param(
            ["self-hosted", "linux.g5.4xlarge.nvidia.gpu", "big"], "gpu-big", id="most-specific"
        ),
        pytest.param(["self-hosted"], None, id="serves-no-type"),
    ],
)
def test_match_runner(labels: list[str], expected: str | None) -> None:
    found = match_runner(normalize_labels(labels), TYPES)
    assert (found.name if found else None) == expected


@pytest.mark.parametrize(
    ("j", "ghost"),
    [
        pytest.param(job(["linux.4xlarge"]), False, id="fresh-queued"),
        pytest.param(job(["linux.4xlarge"], steps=True), True, id="queued-with-steps"),
        pytest.param(job(["linux.4xlarge"], run_done=True), True, id="queued-run-completed"),
        pytest.param(
            job(["linux.4xlarge"], status=JobStatus.IN_PROGRESS, steps=True), False, id="running"
        ),
    ],
)
def test_is_ghost(j: Job, ghost: bool) -> None:
    assert is_ghost(j) is ghost


@pytest.mark.parametrize(
    ("j", "seconds"),
    [
        pytest.param(job(["x"], age_min=62), 62 * 60.0, id="queued-now-minus-created"),
        pytest.param(
            job(["x"], age_min=62, status=JobStatus.IN_PROGRESS, started_after_min=5),
            300.0,
            id="started-started-minus-created",
        ),
        pytest.param(job(["x"], age_min=-1), 0.0, id="clock-skew-never-negative"),
    ],
)
def test_queue_time(j: Job, seconds: float) -> None:
    assert queue_time_seconds(j, NOW) == seconds


def test_compute_queue_counts_sizes_ages_runners_ghosts_and_unmatched() -> None:
    jobs = [
        job(["linux.4xlarge"], age_min=62, job_id=1),
        job(["linux.4xlarge"], age_min=3, job_id=2),
        job(["linux.4xlarge"], age_min=500, steps=True, job_id=3),  # ghost: not demand
        job(["linux.g5.4xlarge.nvidia.gpu"], age_min=7, job_id=4),
        job(["windows"], age_min=30, job_id=5),  # unmatched
        job(["linux.4xlarge"], status=JobStatus.IN_PROGRESS, started_after_min=1, job_id=6),
    ]
    runners = [
        Runner(1, "cpu-i-00000001", normalize_labels(["self-hosted", "linux.4xlarge"]), True, True),
        Runner(
            2, "cpu-i-00000002", normalize_labels(["self-hosted", "linux.4xlarge"]), True, False
        ),
        Runner(
            3, "cpu-i-00000003", normalize_labels(["self-hosted", "linux.4xlarge"]), False, False
        ),
        Runner(4, "other", normalize_labels(["self-hosted", "macos"]), True, False),
    ]
    snap = compute_queue(jobs, runners, TYPES, NOW)
    cpu = snap.per_type["linux.4xlarge"]
    assert (cpu.queue_size, cpu.max_queue_time_seconds) == (2, 62 * 60.0)
    assert (cpu.runners.idle, cpu.runners.busy, cpu.runners.offline) == (1, 1, 1)
    assert cpu.ghost_jobs == 1
    assert cpu.oldest_queued_at == NOW - timedelta(minutes=62)
    assert cpu.queued_ages_seconds == (62 * 60.0, 3 * 60.0)
    assert cpu.started_ages_seconds == (10 * 60.0,)  # job 6, in progress: not demand
    gpu = snap.per_type["linux.g5.4xlarge.nvidia.gpu"]
    assert (gpu.queue_size, gpu.max_queue_time_seconds) == (1, 7 * 60.0)
    assert snap.per_type["gpu-big"].queue_size == 0
    assert snap.per_type["gpu-big"].max_queue_time_seconds == 0.0
    assert (snap.unmatched_jobs, snap.ghost_jobs) == (1, 1)
    assert snap.unmatched_ages_seconds == (30 * 60.0,)


@pytest.mark.parametrize(
    ("labels", "unmatched", "hosted"),
    [
        pytest.param(["ubuntu-latest"], 0, 1, id="github-hosted-is-not-ours"),
        pytest.param(["Windows-2022"], 0, 1, id="hosted-case-insensitive"),
        pytest.param(["self-hosted", "windows"], 1, 0, id="self-hosted-nobody-serves"),
        pytest.param(["linux.4xlarge"], 0, 0, id="matched-never-hosted"),
    ],
)
def test_unmatched_jobs_for_github_hosted_runners_are_not_ours(
    labels: list[str], unmatched: int, hosted: int
) -> None:
    snap = compute_queue([job(labels)], [], TYPES, NOW, ("ubuntu-*", "windows-*", "macos-*"))
    assert (snap.unmatched_jobs, snap.hosted_jobs) == (unmatched, hosted)


def test_a_self_hosted_type_named_like_a_hosted_label_still_matches() -> None:
    ubuntu_gpu = RunnerType("ubuntu-gpu", normalize_labels(["self-hosted", "ubuntu-gpu"]))
    snap = compute_queue([job(["ubuntu-gpu"])], [], (ubuntu_gpu,), NOW, ("ubuntu-*",))
    assert snap.per_type["ubuntu-gpu"].queue_size == 1 and snap.hosted_jobs == 0
