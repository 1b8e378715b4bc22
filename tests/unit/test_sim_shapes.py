"""Synthetic traces: the held-out set on disk is what its generator makes, and the
perturbations do what they say."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.sim import shapes
from autoscaler.sim.trace import read_trace

TEST_DIR = Path(__file__).resolve().parents[2] / "bench" / "traces" / "test"


@pytest.mark.parametrize("name", list(shapes.TEST))
def test_each_committed_test_trace_is_its_generator_at_its_seed(name: str) -> None:
    on_disk = read_trace(TEST_DIR / f"{name}.jsonl")
    made = shapes.TEST[name]()
    assert on_disk.start == made.start
    assert [(j.created_at, j.labels, j.duration) for j in on_disk.jobs] == [
        (j.created_at, j.labels, j.duration) for j in made.jobs
    ]


def test_train_and_test_shapes_are_apart() -> None:
    assert not set(shapes.TRAIN) & set(shapes.TEST)
    train = {len(make().jobs) for make in shapes.TRAIN.values()}
    test = {len(make().jobs) for make in shapes.TEST.values()}
    assert not train & test


def test_doubling_copies_every_job_within_a_minute() -> None:
    base = shapes.held_out()
    twice = shapes.doubled(base, seed=1)
    assert len(twice.jobs) == 2 * len(base.jobs)
    assert sorted(j.duration for j in twice.jobs) == sorted(2 * [j.duration for j in base.jobs])
    assert twice.span - base.span <= 60.0


def test_bursts_add_a_matrix_of_the_commonest_labels_every_ten_minutes() -> None:
    base = shapes.gpu_matrix()
    bursty = shapes.with_bursts(base, seed=2)
    added = len(bursty.jobs) - len(base.jobs)
    windows = int((base.span - base.jobs[0].created_at) // 600)
    assert added == 30 * windows
    assert {j.labels for j in bursty.jobs} == {j.labels for j in base.jobs}
