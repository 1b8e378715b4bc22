"""Synthetic traces with the shapes real CI has, generated deterministically from a seed.

- a **diurnal** rate: quiet nights, a working-day hump peaking mid-afternoon UTC;
- pushes create a workflow **run of several jobs at the same instant** (1-8, mostly few);
- **matrix bursts**: one push fanning out 50-300 jobs at once, a few times a day;
- **long GPU jobs** (30 min to 2 h) at a low rate beside short CPU ones;
- job durations are lognormal (a median and a long right tail), as CI durations are.

Two sets, kept apart: :data:`TRAIN` (the four shapes the defaults may be tuned on) and
:data:`TEST` (other shapes and seeds, generated once into ``bench/traces/test/`` and never
tuned on; ``make bench`` judges the aims there). :func:`doubled` and :func:`with_bursts`
perturb a trace (twice the rate, a matrix every 10 minutes). ``python -m bench.scaling
--write DIR`` writes the train traces as files for ``ci-autoscaler simulate``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
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
    mixes: Sequence[JobMix],
    bursts: Sequence[Burst] = (),
    *,
    days: float = 1.0,
    seed: int = 0,
    from_hour: float = 0.0,
) -> Trace:
    """Arrivals minute by minute (Poisson at the minute's rate) for ``days`` from
    ``from_hour`` UTC, each run's jobs at one instant; bursts added as given."""
    rng = random.Random(seed)  # noqa: S311 (a simulation, not crypto)
    jobs: list[TraceJob] = []
    first = int(from_hour * 60)
    for mix in mixes:
        labels = frozenset(label.lower() for label in mix.labels)
        for minute in range(first, first + int(days * 1440)):
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


def quick_checks(seed: int = 5) -> Trace:
    """A working day of quick checks (median 2.5 min, p95 10 min) in runs of 1-4."""
    return generate([JobMix(CPU, 5.0, 0.4, 150.0, 600.0, run_sizes=(1, 1, 2, 3, 4))], seed=seed)


TRAIN = {
    "diurnal": diurnal,
    "matrix-bursts": matrix_bursts,
    "gpu-long": gpu_long,
    "spot-outage": spot_outage,
    "quick-checks": quick_checks,
}
"""The shapes the defaults may be tuned on."""


# --- held out: other shapes, other seeds; written once to bench/traces/test/


def held_out(seed: int = 101) -> Trace:
    """Six hours of a working morning (08:00-14:00): runs of up to 12 jobs of median 6 min."""
    mix = JobMix(CPU, 4.0, 0.3, 360.0, 1800.0, run_sizes=(1, 1, 1, 2, 3, 5, 8, 12))
    return generate([mix], days=0.25, seed=seed, from_hour=8.0)


def short_jobs(seed: int = 102) -> Trace:
    """Eight hours (07:00-15:00) of short jobs (median 2 min, p95 8 min): a boot is long
    beside a job, so idle time and boots weigh most."""
    mix = JobMix(CPU, 6.0, 0.5, 120.0, 480.0, run_sizes=(1, 1, 1, 2, 2, 4))
    return generate([mix], days=1 / 3, seed=seed, from_hour=7.0)


def gpu_matrix(seed: int = 103) -> Trace:
    """Eight hours (09:00-17:00) of CPU jobs and long GPU jobs with three GPU matrices; the
    fleet takes the GPU spot pool out of capacity from 12:45 to 13:45."""
    bursts = [
        Burst(hour * 3600.0, size, GPU, 1200.0, 3600.0)
        for hour, size in ((10.5, 60), (13.0, 80), (15.5, 40))
    ]
    mixes = [
        JobMix(CPU, 2.5, 0.2, 420.0, 1500.0),
        JobMix(GPU, 0.5, 0.05, 1500.0, 5400.0, run_sizes=(1, 1, 2, 4)),
    ]
    return generate(mixes, bursts, days=1 / 3, seed=seed, from_hour=9.0)


def release_day(seed: int = 104) -> Trace:
    """Six hours (12:00-18:00) of CPU jobs and two release matrices of 400 and 250 jobs,
    larger than one scaling activity launches."""
    bursts = [
        Burst(hour * 3600.0, size, CPU, 900.0, 2400.0) for hour, size in ((14.0, 400), (16.5, 250))
    ]
    mix = JobMix(CPU, 3.0, 0.3, 600.0, 2400.0, run_sizes=(1, 2, 3, 4))
    return generate([mix], bursts, days=0.25, seed=seed, from_hour=12.0)


def drawn(seed: int) -> Trace:
    """Six hours whose shape is drawn from ``seed`` too: the start hour, a CPU mix's rate,
    run sizes and durations, a GPU mix half the time, and up to three matrices. For a
    seed picked after the defaults were frozen (:data:`POST_FREEZE_SEED`), so that
    neither the seed nor the shape could be chosen to suit them."""
    rng = random.Random(f"drawn:{seed}")  # noqa: S311 (a simulation)
    from_hour = rng.uniform(6.0, 12.0)
    cpu_p50 = rng.uniform(120.0, 900.0)
    sizes = tuple(sorted(rng.choice((1, 1, 2, 3, 4, 6, 8, 12, 20)) for _ in range(8)))
    mixes = [
        JobMix(CPU, rng.uniform(1.5, 6.0), 0.2, cpu_p50, cpu_p50 * rng.uniform(3.0, 5.0), sizes)
    ]
    if rng.random() < 0.5:
        gpu_p50 = rng.uniform(900.0, 2700.0)
        mixes.append(JobMix(GPU, rng.uniform(0.2, 1.0), 0.05, gpu_p50, gpu_p50 * 3.0, (1, 1, 2, 4)))
    bursts = [
        Burst(
            (from_hour + rng.uniform(0.5, 5.5)) * 3600.0,
            rng.randint(30, 300),
            CPU,
            cpu_p50,
            cpu_p50 * 3.0,
        )
        for _ in range(rng.randint(0, 3))
    ]
    return generate(mixes, bursts, days=0.25, seed=seed, from_hour=from_hour)


#: The defaults (the scaling knobs, ``decide`` and the scale-in's forecast, the emulated
#: world) were frozen at this commit, which pins them in a test; the seed is the commit's
#: first eight hex digits, so it could not be known, let alone chosen, before they were.
FROZEN_AT = "60ff9efe2cc4dac5d314e842f974af1ec32b76dd"
POST_FREEZE_SEED = int(FROZEN_AT[:8], 16)


TEST: dict[str, Callable[[], Trace]] = {
    "held-out": held_out,
    "short-jobs": short_jobs,
    "gpu-matrix": gpu_matrix,
    "release-day": release_day,
    "post-freeze": lambda: drawn(POST_FREEZE_SEED),
}
"""Held-out shapes: generated once into ``bench/traces/test/`` and judged, never tuned on."""


# --- perturbations


def doubled(trace: Trace, seed: int = 0) -> Trace:
    """Twice the rate: every job twice, the copy up to a minute later."""
    rng = random.Random(seed)  # noqa: S311
    copies = [
        TraceJob(round(j.created_at + rng.uniform(0.0, 60.0), 1), j.labels, j.duration)
        for j in trace.jobs
    ]
    return Trace(trace.start, tuple(sorted((*trace.jobs, *copies), key=lambda j: j.created_at)))


def with_bursts(
    trace: Trace,
    *,
    every: float = 600.0,
    size: int = 30,
    duration_p50: float = 300.0,
    duration_p95: float = 900.0,
    seed: int = 0,
) -> Trace:
    """A matrix of ``size`` jobs every ``every`` seconds over the trace's span, with the
    labels of its most common jobs."""
    if not trace.jobs:
        return trace
    rng = random.Random(seed)  # noqa: S311
    counts: dict[frozenset[str], int] = {}
    for j in trace.jobs:
        counts[j.labels] = counts.get(j.labels, 0) + 1
    labels = max(counts, key=lambda k: counts[k])
    first, last = trace.jobs[0].created_at, trace.jobs[-1].created_at
    added: list[TraceJob] = []
    at = first + every
    while at < last:
        added.extend(
            TraceJob(at, labels, round(_duration(rng, duration_p50, duration_p95)))
            for _ in range(size)
        )
        at += every
    return Trace(trace.start, tuple(sorted((*trace.jobs, *added), key=lambda j: j.created_at)))
