"""Synthetic traces: the held-out set on disk is what its generator makes, and the
perturbations do what they say."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.config import load_config as load_config_file
from autoscaler.scale import forecast
from autoscaler.sim import shapes
from autoscaler.sim.trace import read_trace
from tests.factories import load_config

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


def _defaults() -> dict[str, object]:
    config = load_config(runner_types={"cpu": {"labels": ["self-hosted"], "pools": ["p"]}})
    rt, sim = config.runner_types[0], config.simulation
    return {
        "poll_interval": config.poll_interval,
        "idle_timeout": rt.idle_timeout,
        "min_idle": rt.min_idle.default,
        "max_scale_in_per_tick": config.scaling.max_scale_in_per_tick,
        "rate_window": forecast.RATE_WINDOW,
        "boots_kept": forecast.BOOTS_KEPT,
        "boot_time": (sim.boot_time.p50, sim.boot_time.p95),
        "launch_time": (sim.launch_time.p50, sim.launch_time.p95),
        "boot_correlation": sim.boot_correlation,
        "billing_minimum": sim.billing_minimum,
        "poll_latency": sim.poll_latency,
        "launches": (
            sim.launches.per_activity,
            sim.launches.retry,
            sim.launches.bucket,
            sim.launches.refill,
        ),
    }


#: The policy's knobs and the emulated world as they were when the post-freeze seed was
#: drawn. Changing one unfreezes them: the post-freeze trace then proves nothing until a
#: new seed is drawn the same way (a commit's hash, after the change).
FROZEN = [
    ("poll_interval", 30.0),
    ("idle_timeout", 120.0),
    ("min_idle", 0),
    ("max_scale_in_per_tick", 20),
    ("rate_window", 900.0),
    ("boots_kept", 20),
    ("boot_time", (90.0, 240.0)),
    ("launch_time", (10.0, 30.0)),
    ("boot_correlation", 0.5),
    ("billing_minimum", 60.0),
    ("poll_latency", 5.0),
    ("launches", (100, 10.0, 1000, 2.0)),
]


@pytest.mark.parametrize(("knob", "frozen"), FROZEN, ids=[k for k, _ in FROZEN])
def test_the_defaults_are_those_frozen_before_the_post_freeze_seed(
    knob: str, frozen: object
) -> None:
    assert _defaults()[knob] == frozen


def test_the_post_freeze_seed_is_the_freezing_commits_hash() -> None:
    """The seed is read off a commit that already held these defaults, so it was not
    picked; the committed trace is :func:`shapes.drawn` at it (the test above)."""
    assert len(shapes.FROZEN_AT) == 40
    assert int(shapes.FROZEN_AT[:8], 16) == shapes.POST_FREEZE_SEED
    fleet = load_config_file(TEST_DIR / "post-freeze.yaml", env={})
    assert fleet.simulation.seed == shapes.POST_FREEZE_SEED
