"""A synthetic GitHub org for the benchmarks, driven into a FakeGitHub on a virtual clock.

``populate`` builds (repos, queued jobs, runner types, runners): every runner type has a
pool ``pool-<type>`` of runners named ``pool-<type>-i-<hex>``; half the runners are busy
on a running job; the queued jobs come in runs of 1-6 spread over the repositories, a few
runs wait for an environment approval (a ``waiting`` job) or a concurrency group
(``pending``). ``churn`` moves the clock on and behaves like a fleet: some running jobs
complete, idle runners take the oldest queued job of their type, as many new jobs queue
as started (the queue stays the same size), and every running job's steps move on.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from autoscaler.fakes.github import FakeGitHub

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Size:
    repos: int
    jobs: int
    types: int
    runners: int

    @property
    def label(self) -> str:
        return f"{self.repos:,}/{self.jobs:,}/{self.types}/{self.runners:,}"


def type_names(count: int) -> list[str]:
    return [
        f"linux.g5.{i}.nvidia.gpu" if i < max(1, count // 5) else f"linux.{i}xlarge"
        for i in range(count)
    ]


@dataclass
class Org:
    fake: FakeGitHub
    size: Size
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    types: list[str] = field(default_factory=list)
    queued: dict[str, deque[int]] = field(default_factory=dict)
    running: dict[int, int] = field(default_factory=dict)
    """runner id -> the job it runs."""
    idle: dict[str, list[int]] = field(default_factory=dict)
    kinds: dict[int, str] = field(default_factory=dict)
    """runner id -> its runner type."""
    now: datetime = T0

    def populate(self) -> None:
        size, fake, rng = self.size, self.fake, self.rng
        self.types = type_names(size.types)
        self.queued = {t: deque() for t in self.types}
        self.idle = {t: [] for t in self.types}
        for i in range(size.repos):
            fake.add_repo(f"repo-{i:04d}")
        for j in range(size.runners):
            kind = self.types[j % len(self.types)]
            runner = fake.register_runner(f"pool-{kind}-i-{j:017x}", ["self-hosted", kind])
            self.kinds[runner] = kind
            if j % 2:
                job = fake.queue_job(self._repo(), ["self-hosted", kind], created_at=self._past())
                fake.assign_job(job, runner)
                self.running[runner] = job
            else:
                self.idle[kind].append(runner)
        queued = 0
        while queued < size.jobs:
            queued += self._queue_run(min(size.jobs - queued, rng.randint(1, 6)))

    def _repo(self) -> str:
        return f"repo-{self.rng.randrange(self.size.repos):04d}"

    def _past(self) -> datetime:
        return self.now - timedelta(seconds=self.rng.uniform(0, 3600))

    def _queue_run(self, jobs: int) -> int:
        """A run with ``jobs`` queued jobs (sometimes behind an approval); returns ``jobs``."""
        fake, rng = self.fake, self.rng
        repo, kind = self._repo(), rng.choice(self.types)
        created = self._past() if self.now == T0 else self.now
        labels = ["self-hosted", kind]
        run_id = None
        roll = rng.random()
        if roll < 0.03:  # a deploy job waits for an environment approval
            gate = fake.queue_job(repo, labels, created_at=created, status="waiting", name="gate")
            run_id = fake.job(gate).run_id
        for _ in range(jobs):
            job = fake.queue_job(repo, labels, created_at=created, run_id=run_id)
            run_id = fake.job(job).run_id
            self.queued[kind].append(job)
        if roll > 0.99 and run_id is not None:
            fake.set_run_status(run_id, "pending")
        return jobs

    def churn(self, seconds: float) -> dict[str, int]:
        """Move the clock on; jobs complete, start and queue like on a busy fleet."""
        self.now += timedelta(seconds=seconds)
        fake, rng = self.fake, self.rng
        done = [r for r in self.running if rng.random() < 0.1]
        for runner in done:
            fake.complete_job(self.running.pop(runner))
            self.idle[self.kinds[runner]].append(runner)
        started = 0
        for kind, idle in self.idle.items():
            waiting = self.queued[kind]
            while idle and waiting:
                job = waiting.popleft()
                if fake.job(job).status != "queued":
                    continue
                runner = idle.pop()
                fake.assign_job(job, runner)
                self.running[runner] = job
                started += 1
        added = 0
        while added < started:
            added += self._queue_run(min(started - added, rng.randint(1, 6)))
        return {"completed": len(done), "started": started, "queued": added}
