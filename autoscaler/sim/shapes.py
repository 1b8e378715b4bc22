"""Synthetic traces with the shapes real CI has, generated deterministically from a seed.

- a **diurnal** rate: quiet nights, a working-day hump peaking mid-afternoon UTC;
- pushes create a workflow **run of several jobs at the same instant** (1-8, mostly few);
- **matrix bursts**: one push fanning out 50-300 jobs at once, a few times a day;
- **long GPU jobs** (30 min to 2 h) at a low rate beside short CPU ones;
- job durations are lognormal (a median and a long right tail), as CI durations are.

Used by ``make bench`` (the shipped traces) and the tests; ``python -m bench.scaling
--write DIR`` writes them as trace files for ``ci-autoscaler simulate``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.sim.trace import DEFAULT_START, Trace, TraceJob

DAY = 86400.0
_Z95 = 1.6448536269514722


@dataclass(frozen=True)
class JobMix:
    """One kind of job: its labels, its arrival rate and its duration."""

    labels: tuple[str, ...]
    runs_per_minute_peak: float
    """Runs per minute at the top of the working-day hump."""
    runs_per_minute_night: float
    duration_p50: float
    duration_p95: float
    run_sizes: Sequence[int] = (1, 1, 1, 1, 2, 2, 3, 4, 6, 8)
    """Jobs per run, drawn uniformly from this list."""


@dataclass(frozen=True)
class Burst:
    """A matrix push: ``size`` jobs of ``labels`` created at ``at`` seconds."""

    at: float
    size: int
    labels: tuple[str, ...]
    duration_p50: float
    duration_p95: float


def hump(seconds: float) -> float:
    """0 at night, 1 at 14:00 UTC: a half sine over 07:00-21:00 each day."""
    hour = (seconds % DAY) / 3600.0
    if not 7.0 <= hour <= 21.0:
        return 0.0
    return math.sin(math.pi * (hour - 7.0) / 14.0)


def _duration(rng: random.Random, p50: float, p95: float) -> float:
    sigma = math.log(p95 / p50) / _Z95
    return max(5.0, rng.lognormvariate(math.log(p50), sigma))


def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def generate(
    mixes: Sequence[JobMix], bursts: Sequence[Burst] = (), *, days: float = 1.0, seed: int = 0
) -> Trace:
    """Arrivals minute by minute (Poisson at the minute's rate), each run's jobs at one
    instant; bursts added as given."""
    rng = random.Random(seed)  # noqa: S311 (a simulation, not crypto)
    jobs: list[TraceJob] = []
    for mix in mixes:
        labels = frozenset(label.lower() for label in mix.labels)
        for minute in range(int(days * 1440)):
            start = minute * 60.0
            rate = mix.runs_per_minute_night + (
                mix.runs_per_minute_peak - mix.runs_per_minute_night
            ) * hump(start + 30.0)
            for _ in range(_poisson(rng, rate)):
                at = start + rng.uniform(0.0, 60.0)
                for _ in range(rng.choice(list(mix.run_sizes))):
                    jobs.append(
                        TraceJob(
                            round(at, 1),
                            labels,
                            round(_duration(rng, mix.duration_p50, mix.duration_p95)),
                        )
                    )
    for burst in bursts:
        labels = frozenset(label.lower() for label in burst.labels)
        for _ in range(burst.size):
            duration = _duration(rng, burst.duration_p50, burst.duration_p95)
            jobs.append(TraceJob(burst.at, labels, round(duration)))
    jobs.sort(key=lambda j: j.created_at)
    return Trace(DEFAULT_START, tuple(jobs))


CPU = ("self-hosted", "linux.4xlarge")
GPU = ("self-hosted", "linux.g5.4xlarge.nvidia.gpu")


def diurnal(seed: int = 1) -> Trace:
    """A working day of CPU jobs: ~1,600 runs, ~4,000 jobs of median 8 min."""
    return generate([JobMix(CPU, 3.0, 0.2, 480.0, 1800.0)], seed=seed)


def matrix_bursts(seed: int = 2) -> Trace:
    """A quieter day plus six matrix pushes of 50-300 jobs each."""
    rng = random.Random(seed)  # noqa: S311
    bursts = [
        Burst(hour * 3600.0 + rng.uniform(0, 1800), size, CPU, 600.0, 1500.0)
        for hour, size in ((9, 120), (11, 300), (13, 50), (14, 200), (16, 80), (20, 150))
    ]
    return generate([JobMix(CPU, 1.5, 0.1, 480.0, 1800.0)], bursts, seed=seed)


def gpu_long(seed: int = 3) -> Trace:
    """CPU jobs beside long GPU jobs (median 45 min, p95 2 h)."""
    return generate(
        [
            JobMix(CPU, 2.0, 0.2, 420.0, 1500.0),
            JobMix(GPU, 0.4, 0.05, 2700.0, 7200.0, run_sizes=(1, 1, 1, 2, 2, 4)),
        ],
        seed=seed,
    )


def spot_outage(seed: int = 4) -> Trace:
    """GPU and CPU jobs with two GPU matrix pushes; the shipped config takes the GPU spot
    pool out of capacity for two hours in the afternoon."""
    bursts = [
        Burst(12.5 * 3600.0, 60, GPU, 1800.0, 5400.0),
        Burst(15.0 * 3600.0, 60, GPU, 1800.0, 5400.0),
    ]
    return generate(
        [
            JobMix(CPU, 2.0, 0.2, 420.0, 1500.0),
            JobMix(GPU, 0.3, 0.05, 1800.0, 5400.0, run_sizes=(1, 1, 2, 2, 4)),
        ],
        bursts,
        seed=seed,
    )


SHAPES = {
    "diurnal": diurnal,
    "matrix-bursts": matrix_bursts,
    "gpu-long": gpu_long,
    "spot-outage": spot_outage,
}
