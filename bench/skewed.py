"""A synthetic org skewed as a real one is, driven into a FakeGitHub on a virtual clock.

A real org is not ``jobs / repos`` everywhere: a few repositories hold most of the runs
and a long tail sees one now and then. Here a run lands in repository ``i`` with weight
``1 / (i + 1) ** SKEW`` (Zipf), so at 1,000 repositories the busiest holds about 40% of
the live runs and three in four hold none at a given moment. Runs are what CI makes:

- most are one stage of 1-3 jobs; many are a build then a test matrix that queues when
  the build ends (its jobs appear in the running run); a few matrices are past 100 jobs
  (their jobs listing is two pages);
- a few wait for an environment approval (a ``waiting`` job, the run reports
  ``waiting``), a few sit ``pending`` in a concurrency group, a few are ``requested`` for
  a moment; now and then a completed run has a job re-run (it queues again under the
  run's old creation time);
- every repository has completed runs behind the live ones (its history).

:meth:`SkewedOrg.churn` moves the clock on like a fleet: jobs run for their duration
(minutes) and complete, a completed stage queues the next, runners (persistent: one
that finishes takes the next job at once) take the oldest queued job of their type,
approvals and concurrency groups release, and new runs arrive about as fast as runs
complete, so the org stays the same size.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_reruns import latest_jobs, rerun
from bench.org import T0, type_names

#: Zipf exponent of the repositories' share of the runs.
SKEW = 1.5
#: Mean seconds a job runs (each draws its own, at least a minute).
JOB_SECONDS = 600.0
#: Virtual time the org runs before the first tick, so it starts mid-flow.
WARMUP = timedelta(minutes=60)
#: Completed runs per repository before the start, at least (the busy ones hold more).
HISTORY = 3


@dataclass(frozen=True)
class Shape:
    repos: int
    runs: int
    """Live runs at the start, kept about steady by the churn."""
    types: int
    runners: int

    @property
    def label(self) -> str:
        return f"{self.repos:,}/{self.runs:,}/{self.types}/{self.runners:,}"


@dataclass
class _Plan:
    """What a live run still has to do: its stages to come, each (runner type, jobs)."""

    repo: str
    stages: deque[tuple[str, int]]
    current: list[int] = field(default_factory=list)
    """The job ids of the stage that runs now."""


@dataclass
class SkewedOrg:
    fake: FakeGitHub
    shape: Shape
    rng: random.Random = field(default_factory=lambda: random.Random(11))
    now: datetime = T0 - WARMUP
    types: list[str] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    plans: dict[int, _Plan] = field(default_factory=dict)
    """Live run id -> its plan."""
    queued: dict[str, deque[int]] = field(default_factory=dict)
    """Runner type -> queued job ids, oldest first (some may have started or ended)."""
    idle: dict[str, list[int]] = field(default_factory=dict)
    kinds: dict[int, str] = field(default_factory=dict)
    running: dict[int, tuple[int, datetime]] = field(default_factory=dict)
    """Runner id -> (the job it runs, when that job ends)."""
    gates: dict[int, int] = field(default_factory=dict)
    """Waiting (approval) job id -> its run."""
    pending: set[int] = field(default_factory=set)
    requested: set[int] = field(default_factory=set)
    done: deque[int] = field(default_factory=lambda: deque(maxlen=200))
    """Recently completed runs (a re-run picks one)."""

    # --- the org at the start
    def populate(self) -> None:
        shape, fake = self.shape, self.fake
        self.types = type_names(shape.types)
        self.queued = {t: deque() for t in self.types}
        self.idle = {t: [] for t in self.types}
        self.weights = [1 / (i + 1) ** SKEW for i in range(shape.repos)]
        for i in range(shape.repos):
            fake.add_repo(self._name(i))
        for j in range(shape.runners):
            kind = self.types[j % len(self.types)]
            runner = fake.register_runner(f"pool-{kind}-i-{j:017x}", ["self-hosted", kind])
            self.kinds[runner] = kind
            self.idle[kind].append(runner)
        self._history()
        while self.now < T0:  # the org fills up, then holds its size
            self.churn(30.0)

    def _name(self, index: int) -> str:
        return f"repo-{index:04d}"

    def _repo(self) -> str:
        return self._name(self.rng.choices(range(self.shape.repos), self.weights)[0])

    def _history(self) -> None:
        """Completed runs: every repository some, the busy ones in proportion."""
        fake, rng = self.fake, self.rng
        total = sum(self.weights)
        for i, weight in enumerate(self.weights):
            count = HISTORY + int(2 * self.shape.runs * weight / total)
            for _ in range(count):
                created = self.now - timedelta(hours=rng.uniform(1, 48))
                labels = ["self-hosted", self.types[0]]
                job = fake.queue_job(self._name(i), labels, created_at=created)
                fake.complete_job(job)
                self.done.append(fake.job(job).run_id)

    # --- runs
    def _stages(self) -> deque[tuple[str, int]]:
        rng, types = self.rng, self.types
        build, test = rng.choice(types), rng.choice(types)
        roll = rng.random()
        if roll < 0.60:
            return deque([(build, rng.randint(1, 3))])
        if roll < 0.88:
            return deque([(build, 1), (test, rng.randint(2, 8))])
        if roll < 0.98:
            return deque([(build, rng.randint(1, 2)), (test, rng.randint(10, 40))])
        return deque([(build, 1), (test, rng.randint(100, 140))])

    def _new_run(self, created: datetime) -> int:
        fake, rng = self.fake, self.rng
        repo, stages = self._repo(), self._stages()
        roll = rng.random()
        run_id = None
        if roll < 0.03:  # a deploy job waits for an environment approval
            labels = ["self-hosted", stages[0][0]]
            gate = fake.queue_job(repo, labels, created_at=created, status="waiting", name="gate")
            run_id = fake.job(gate).run_id
            self.gates[gate] = run_id
        plan = _Plan(repo, stages)
        run_id = self._queue_stage(plan, run_id, created)
        self.plans[run_id] = plan
        if 0.03 <= roll < 0.04:
            fake.set_run_status(run_id, "pending")
            self.pending.add(run_id)
        elif 0.04 <= roll < 0.045:
            fake.set_run_status(run_id, "requested")
            self.requested.add(run_id)
        return run_id

    def _queue_stage(self, plan: _Plan, run_id: int | None, created: datetime) -> int:
        kind, count = plan.stages.popleft()
        labels = ["self-hosted", kind]
        plan.current = []
        for n in range(count):
            job = self.fake.queue_job(
                plan.repo, labels, created_at=created, run_id=run_id, name=f"{kind}-{n}"
            )
            run_id = self.fake.job(job).run_id
            plan.current.append(job)
            self.queued[kind].append(job)
        assert run_id is not None
        return run_id

    def _rerun(self, run_id: int) -> None:
        """Re-run the last job of a completed run: a new attempt, queued, under the run's
        old creation time (GitHub keeps ``created_at``)."""
        fake = self.fake
        with fake.lock:
            run = fake._runs[run_id]
            last = latest_jobs(fake, run.job_ids)[-1]
            rerun(fake, fake.owner, run.repo, last.id, self.now)
            new = run.job_ids[-1]
        self.queued.setdefault(last.labels[-1], deque()).append(new)
        self.plans[run_id] = _Plan(run.repo, deque(), [new])

    # --- the clock moves on
    def churn(self, seconds: float) -> dict[str, int]:
        """Move the clock on; jobs end, stages queue, runners take jobs, runs arrive."""
        self.now += timedelta(seconds=seconds)
        fake, rng = self.fake, self.rng
        ended = 0
        for runner, (job, until) in list(self.running.items()):
            if until <= self.now:
                fake.complete_job(job)
                del self.running[runner]
                self.idle[self.kinds[runner]].append(runner)
                ended += 1
        finished = self._advance()
        for run_id in [r for r in self.pending if rng.random() < 0.3]:
            fake.set_run_status(run_id, None)
            self.pending.discard(run_id)
        for run_id in list(self.requested):
            fake.set_run_status(run_id, None)
            self.requested.discard(run_id)
        for gate in [g for g in self.gates if rng.random() < 0.05]:
            fake.set_job_status(gate, "queued")
            self.queued[fake.job(gate).labels[-1]].append(gate)
            del self.gates[gate]
        started = self._start_jobs()
        arrived = 0
        filling = max(0, min(self.shape.runs - len(self.plans), -(-self.shape.runs // 20)))
        for _ in range(finished + filling):
            if self.done and rng.random() < 0.05:
                run_id = self.done[rng.randrange(len(self.done))]
                self.done.remove(run_id)
                self._rerun(run_id)
            else:
                self._new_run(self.now)
            arrived += 1
        return {"ended": ended, "started": started, "runs_done": finished, "runs_new": arrived}

    def _advance(self) -> int:
        """Stages whose jobs all ended queue the next; runs with none left are done."""
        fake = self.fake
        finished = 0
        for run_id, plan in list(self.plans.items()):
            if run_id in self.pending or any(
                fake.job(j).status != "completed" for j in plan.current
            ):
                continue
            if any(self.gates.get(g) == run_id for g in self.gates):
                continue
            if plan.stages:
                self._queue_stage(plan, run_id, self.now)
                continue
            del self.plans[run_id]
            self.done.append(run_id)
            finished += 1
        return finished

    def _start_jobs(self) -> int:
        """Idle runners take the oldest queued job of their type (a held run's wait)."""
        fake, started = self.fake, 0
        for kind, idle in self.idle.items():
            waiting, held = self.queued[kind], deque[int]()
            while idle and waiting:
                job = waiting.popleft()
                record = fake.job(job)
                if record.status != "queued":
                    continue
                if record.run_id in self.pending:
                    held.append(job)
                    continue
                runner = idle.pop()
                fake.assign_job(job, runner)
                seconds = max(60.0, self.rng.expovariate(1 / JOB_SECONDS))
                self.running[runner] = (job, self.now + timedelta(seconds=seconds))
                started += 1
            waiting.extendleft(reversed(held))
        return started

    # --- what a tick should see
    def queued_ids(self) -> set[int]:
        """The queued jobs that are demand now (their run has not completed)."""
        fake = self.fake
        with fake.lock:
            return {
                j.id
                for j in fake._jobs.values()
                if j.status == "queued" and fake.run_status(fake._runs[j.run_id]) != "completed"
            }

    def census(self) -> dict[str, int]:
        """Live runs by the status GitHub reports, jobs by status, repositories with a
        live run."""
        fake = self.fake
        out: dict[str, int] = {}
        live_repos = set()
        with fake.lock:
            for run_id, plan in self.plans.items():
                status = fake.run_status(fake._runs[run_id])
                out[f"runs_{status}"] = out.get(f"runs_{status}", 0) + 1
                live_repos.add(plan.repo)
            for job in fake._jobs.values():
                if job.status != "completed":
                    out[f"jobs_{job.status}"] = out.get(f"jobs_{job.status}", 0) + 1
        out["repos_live"] = len(live_repos)
        return out
