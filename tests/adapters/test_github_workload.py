"""The demo's synthetic workload and static fleet, driven into the fake GitHub."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from autoscaler.domain import normalize_labels
from autoscaler.fakes.github import FakeGitHub
from autoscaler.sim.workload import UNMATCHED_LABELS, StaticFleet, Workload

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
TYPES = [
    ("linux.4xlarge", ["self-hosted", "linux.4xlarge"]),
    ("linux.2xlarge", ["self-hosted", "Linux.2xlarge"]),
    ("linux.g5.4xlarge.nvidia.gpu", ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]),
]


def _simulate(seed: int, seconds: int) -> tuple[FakeGitHub, list[int]]:
    now = [T0]
    fake = FakeGitHub(clock=lambda: now[0])
    workload = Workload(fake, TYPES, seed=seed, unmatched_per_minute=1.0)
    fleet = StaticFleet(fake, TYPES, per_type=2, seed=seed)
    queue_sizes = []
    for _ in range(seconds):
        now[0] += timedelta(seconds=1)
        workload.step(now[0])
        fleet.step(now[0])
        queue_sizes.append(len(fake.queued_jobs()))
    return fake, queue_sizes


def test_same_seed_same_jobs() -> None:
    first, sizes_a = _simulate(seed=3, seconds=300)
    second, sizes_b = _simulate(seed=3, seconds=300)
    assert sizes_a == sizes_b
    assert [(j.repo, j.labels, j.status) for j in first.jobs()] == [
        (j.repo, j.labels, j.status) for j in second.jobs()
    ]


def test_queues_rise_and_drain_and_jobs_complete() -> None:
    fake, sizes = _simulate(seed=7, seconds=720)
    assert max(sizes) >= 5
    assert min(sizes[len(sizes) // 2 :]) < max(sizes) // 2
    statuses = {j.status for j in fake.jobs()}
    assert statuses >= {"queued", "completed"}
    assert len({j.repo for j in fake.jobs()}) >= 3


def test_runners_only_take_jobs_their_labels_cover() -> None:
    fake, _ = _simulate(seed=11, seconds=400)
    labels_of = {r.name: normalize_labels(r.labels) for r in fake.runners()}
    started = [j for j in fake.jobs() if j.runner_name is not None]
    assert started
    for job in started:
        assert normalize_labels(job.labels) <= labels_of[job.runner_name or ""]
    unmatched = [j for j in fake.jobs() if j.labels == UNMATCHED_LABELS]
    assert unmatched
    assert all(j.status == "queued" for j in unmatched)
    busy = {j.runner_name for j in fake.jobs() if j.status == "in_progress"}
    assert busy == {r.name for r in fake.runners() if r.busy}
