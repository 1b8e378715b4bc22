"""Benchmark: what job retry costs GitHub's rate limit, beside the poll it rides on.

A repository where ``n`` runs (2 jobs each, one of them lost with its runner) complete
between two ticks; the controller's GitHub source polls, then the job-retry reader drains
the completed runs tick after tick (30 s of virtual time apart) until it has them all.
Measured by the fake: requests that counted against its primary rate limit, by the poll
and by the reader, side by side in one run, at several sizes; and the time the pure
classifier, the run verdict and the decision take for those jobs.

Aims: the reader never spends more than its per-tick bound (one jobs page per run plus one
annotations page per failed job, for ``RUNS_PER_TICK`` runs), every failed job is found,
and judging stays under a millisecond per job.
"""

from __future__ import annotations

import time
from datetime import timedelta

from prometheus_client import CollectorRegistry

from autoscaler.config import GitHubConfig, JobRetryConfig
from autoscaler.domain import CompletedRun
from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_reruns import LOST, annotation, fail_job
from autoscaler.job_retry.classify import classify, judge_run
from autoscaler.job_retry.decide import decide
from autoscaler.job_retry.ledger import Ledger
from autoscaler.observe.github import failures
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics
from bench import aims
from bench.org import T0


def counted(fake: FakeGitHub) -> int:
    """Requests that count against the primary rate limit (a 304 does not)."""
    return fake.count() - fake.count(304)


SIZES = (5, 20, 100)
LABELS = ["self-hosted", "gpu"]


def measure(n: int) -> dict[str, float]:
    now = T0
    with FakeGitHub(clock=lambda: now) as fake:
        fake.add_repo("app")
        lost: list[int] = []
        fine: list[int] = []
        for i in range(n):
            runner = fake.register_runner(f"ci-gpu-i-{i:017x}", LABELS)
            job = fake.queue_job("app", LABELS, name="test")
            fake.assign_job(job, runner)
            lost.append(job)
            other = fake.register_runner(f"ci-gpu-i-{i + n:017x}", LABELS)
            ok = fake.queue_job("app", LABELS, name="lint", run_id=fake.job(job).run_id)
            fake.assign_job(ok, other)
            fine.append(ok)
        cfg = GitHubConfig(owner="demo-org", api_url=fake.url, token=Secret("fake-token"))
        source = GitHubSource(cfg, Metrics(CollectorRegistry()), sleep=lambda _: None)
        try:
            source.observe(now)
            for i, job in enumerate(lost):
                fail_job(fake, job, annotations=[annotation(LOST.format(runner=i))])
            for job in fine:
                fake.complete_job(job)
            now += timedelta(seconds=30)
            before = counted(fake)
            source.observe(now)
            poll = counted(fake) - before
            found: list[CompletedRun] = []
            ticks, worst = 0, 0
            while source.completed.finished:
                before = counted(fake)
                found += source.completed_runs(now)
                worst = max(worst, counted(fake) - before)
                ticks += 1
                now += timedelta(seconds=30)
        finally:
            source.close()
    jobs = [j for run in found for j in run.jobs]
    failed = [j for j in jobs if j.failed]
    started = time.perf_counter()
    judged = [
        (r, judge_run([(j, classify(j, {}, JobRetryConfig())) for j in r.jobs])) for r in found
    ]
    decide(judged, Ledger(), JobRetryConfig(enabled=True), now)
    per_job_ms = (time.perf_counter() - started) * 1000 / max(1, len(jobs))
    return {
        "runs": n,
        "poll": poll,
        "retry_worst_tick": worst,
        "ticks_to_drain": ticks,
        "failed_found": len(failed),
        "judge_ms_per_job": per_job_ms,
    }


def run() -> bool:
    print("job retry: GitHub requests beside the poll (counted by the fake), per tick")
    print(
        f"{'runs done':>9} {'poll':>6} {'retry max/tick':>15} {'ratio':>6} "
        f"{'ticks':>6} {'failed found':>13} {'judge ms/job':>13}"
    )
    counts, fast = True, True
    bound = failures.RUNS_PER_TICK * 2  # a jobs page + one annotations page per run
    for n in SIZES:
        m = measure(n)
        ratio = m["retry_worst_tick"] / max(1.0, m["poll"])
        print(
            f"{n:>9} {m['poll']:>6.0f} {m['retry_worst_tick']:>15.0f} {ratio:>6.2f} "
            f"{m['ticks_to_drain']:>6.0f} {m['failed_found']:>13.0f} "
            f"{m['judge_ms_per_job']:>13.3f}"
        )
        counts &= m["retry_worst_tick"] <= bound and m["failed_found"] == n
        fast &= m["judge_ms_per_job"] < 1.0
    ok = aims.count(f"at most {bound} requests a tick, every failed job found", counts)
    return aims.timed("< 1 ms to judge a job", fast) and ok
