"""A moving synthetic workload for the demo, driven into a FakeGitHub.

:class:`Workload` enqueues jobs per runner type at rates that swing over time (a sine per
type, phases spread, GPU types slower and rarer), across several repositories and now and
then a job no runner type serves. :class:`StaticFleet` is a few always-on runners per type
that pick matching queued jobs (oldest first), run them for a while and complete them, so
queues rise at the peaks and drain in the troughs.

Pure-ish: time is passed in (``step(now)``), randomness is ``random.Random(seed)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.domain import normalize_labels
from autoscaler.fakes.github import FakeGitHub

DEFAULT_REPOS = ("web", "api", "infra", "ml-training", "mobile")
UNMATCHED_LABELS = ("self-hosted", "linux.arm64.nobody-serves-this")


def is_gpu(name: str) -> bool:
    return "gpu" in name.lower()


@dataclass(frozen=True)
class TypeProfile:
    name: str
    labels: tuple[str, ...]
    per_minute: float
    """Mean arrival rate (jobs/minute) around which the rate swings."""
    phase: float
    duration: float
    """Mean job duration in seconds."""


def profiles(runner_types: Sequence[tuple[str, Sequence[str]]]) -> list[TypeProfile]:
    """CPU types: ~3 jobs/min of ~60 s; GPU types: ~1 job/min of ~180 s (a fleet of 3
    per type keeps up on average, falls behind at the peaks and drains in the troughs)."""
    count = max(1, len(runner_types))
    return [
        TypeProfile(
            name,
            tuple(labels),
            1.0 if is_gpu(name) else 3.0,
            2 * math.pi * index / count,
            180.0 if is_gpu(name) else 60.0,
        )
        for index, (name, labels) in enumerate(runner_types)
    ]


def poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method; fine for the small means of one step."""
    if mean <= 0:
        return 0
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


class Workload:
    """Enqueues jobs into ``fake`` at swinging rates; call ``step(now)`` every second or so."""

    def __init__(
        self,
        fake: FakeGitHub,
        runner_types: Sequence[tuple[str, Sequence[str]]],
        seed: int = 0,
        *,
        repos: Sequence[str] = DEFAULT_REPOS,
        period: float = 240.0,
        swing: float = 0.9,
        unmatched_per_minute: float = 0.1,
        rate_scale: float = 1.0,
        shape: Callable[[float], float] | None = None,
        type_scale: Mapping[str, float] | None = None,
    ) -> None:
        self.fake = fake
        self.profiles = profiles(runner_types)
        self.rng = random.Random(seed)  # noqa: S311 - a simulation, not crypto
        self.repos = tuple(repos)
        self.period = period
        self.swing = swing
        self.unmatched_per_minute = unmatched_per_minute
        #: Multiplies every type's arrival rate (the demo compresses time with it).
        self.rate_scale = rate_scale
        #: Seconds since the first step -> multiplier of every type's mean rate (and of
        #: the unmatched rate), instead of the phase-spread sine: a scripted story, all
        #: types at once (the demo's burst, then calm).
        self.shape = shape
        #: Runner type -> an extra multiplier of its rate (1 when absent).
        self.type_scale = dict(type_scale or {})
        self._start: datetime | None = None
        self._last: datetime | None = None
        for repo in self.repos:
            fake.add_repo(repo)

    def rate(self, profile: TypeProfile, now: datetime) -> float:
        """Jobs per minute for this type at ``now``."""
        t = self.elapsed(now)
        mean = self.rate_scale * self.type_scale.get(profile.name, 1.0) * profile.per_minute
        if self.shape is not None:
            return max(0.0, mean * self.shape(t))
        wave = math.sin(2 * math.pi * t / self.period + profile.phase)
        return max(0.0, mean * (1 + self.swing * wave))

    def elapsed(self, now: datetime) -> float:
        """Seconds since the first step (0 before it)."""
        return 0.0 if self._start is None else (now - self._start).total_seconds()

    def step(self, now: datetime) -> list[int]:
        """Enqueue the arrivals since the last step; returns the new job ids."""
        if self._start is None:
            self._start = self._last = now
        assert self._last is not None
        minutes = max(0.0, (now - self._last).total_seconds()) / 60.0
        self._last = now
        new: list[int] = []
        for profile in self.profiles:
            arrivals = poisson(self.rng, self.rate(profile, now) * minutes)
            while arrivals > 0:
                size = min(arrivals, self.rng.choice((1, 1, 2, 3)))
                arrivals -= size
                new.extend(self._enqueue(profile.labels, size, now))
        unmatched = self.unmatched_per_minute * minutes
        if self.shape is not None:
            unmatched *= max(0.0, self.shape(self.elapsed(now)))
        for _ in range(poisson(self.rng, unmatched)):
            new.extend(self._enqueue(UNMATCHED_LABELS, 1, now))
        return new

    def burst(self, labels: Sequence[str], size: int, now: datetime) -> list[int]:
        """A workflow run of ``size`` jobs at once (a rush the swing would not make)."""
        return self._enqueue(labels, size, now)

    def _enqueue(self, labels: Sequence[str], size: int, now: datetime) -> list[int]:
        """One workflow run of ``size`` jobs in a random repository."""
        repo = self.rng.choice(self.repos)
        first = self.fake.queue_job(repo, labels, created_at=now, name="build")
        run_id = self.fake.job(first).run_id
        ids = [first]
        for index in range(1, size):
            job = self.fake.queue_job(
                repo, labels, created_at=now, name=f"test ({index})", run_id=run_id
            )
            ids.append(job)
        return ids


class StaticFleet:
    """A few always-on runners per type that run matching queued jobs to completion."""

    def __init__(
        self,
        fake: FakeGitHub,
        runner_types: Sequence[tuple[str, Sequence[str]]],
        per_type: int = 3,
        seed: int = 0,
    ) -> None:
        self.fake = fake
        self.rng = random.Random(seed + 1)  # noqa: S311 - a simulation, not crypto
        self._durations = {p.name: p.duration for p in profiles(runner_types)}
        #: runner id -> (runner type, its labels)
        self.runners: dict[int, tuple[str, frozenset[str]]] = {}
        #: runner id -> (job id, when it ends)
        self.running: dict[int, tuple[int, datetime]] = {}
        for name, labels in runner_types:
            for index in range(per_type):
                runner_id = fake.register_runner(f"{name}-static-{index}", labels)
                self.runners[runner_id] = (name, normalize_labels(labels))

    def step(self, now: datetime) -> None:
        """Complete the jobs whose time is up, then give idle runners the oldest match."""
        for runner_id, (job_id, ends) in list(self.running.items()):
            if ends <= now:
                self.fake.complete_job(job_id)
                del self.running[runner_id]
        queued = sorted(self.fake.queued_jobs(), key=lambda j: (j.created_at, j.id))
        taken: set[int] = set()
        for runner_id, (type_name, labels) in self.runners.items():
            if runner_id in self.running:
                continue
            job = next(
                (j for j in queued if j.id not in taken and normalize_labels(j.labels) <= labels),
                None,
            )
            if job is None:
                continue
            taken.add(job.id)
            self.fake.assign_job(job.id, runner_id)
            mean = self._durations[type_name]
            seconds = self.rng.uniform(0.5 * mean, 1.5 * mean)
            self.running[runner_id] = (job.id, now + timedelta(seconds=seconds))
