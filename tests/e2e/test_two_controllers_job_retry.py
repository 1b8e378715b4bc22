"""A run lost to infrastructure is re-run exactly once across a leader's death and a restart.

Two real controllers (``ci-autoscaler run`` subprocesses) on one DynamoDB table, with
``job_retry`` on. A fail-fast matrix of four legs: the runner of leg 1 is lost (GitHub's
"lost communication" annotation), GitHub cancels legs 2-4 after it. The leader records the
run attempt in the table, then asks ``rerun-failed-jobs``; the fake GitHub makes the new
attempt and, before its 201 goes out, the leader is killed (``kill -9``): the answer is
lost. (The request is held until the follower has judged the run: its poll would miss a
completion that a re-run follows at once.) The follower takes over, a new controller
starts, and the new leader finds the record unanswered, reads the run (attempt 2
already) and asks nothing. GitHub saw one request; the run is back with all four legs
queued. moto's server runs in a process of its own, one request at a time (see
tests/e2e/test_two_controllers.py).
"""

from __future__ import annotations

import json
import re
import threading
from functools import partial
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.fakes.github_reruns import LOST, annotation, fail_job
from tests.e2e.pair import CPU, Controller, Pair, pair, wait_until

pytestmark = pytest.mark.e2e

ASK = re.compile(r"/actions/runs/(\d+)/rerun-failed-jobs$")


def queued(c: Controller) -> float | None:
    """The CPU queue this controller sees (None: it is down)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{c.port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "ci_autoscaler_queue_size" and s.labels.get("runner_type") == "linux.4xlarge"
    )


def sees_three_queued(c: Controller) -> bool:
    return (queued(c) or 0) >= 3


def judged_lost(c: Controller) -> bool:
    """The controller has judged a completed run lost. A follower decides and acts on
    nothing: it says so in its log and counts nothing."""
    return said(c, "verdict lost, result rerun")


def counted_reruns(c: Controller) -> float:
    """``job_retry_runs_total{result="rerun"}`` on the controller's ``/metrics``."""
    text = httpx.get(f"http://127.0.0.1:{c.port}/metrics", timeout=2).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "ci_autoscaler_job_retry_runs_total" and s.labels.get("result") == "rerun"
    )


def epoch(p: Pair) -> int:
    lease = p.lease()
    return int(lease["epoch"]) if lease is not None else 0


def other_leader(p: Pair, dead: Controller) -> Controller | None:
    c = p.leader()
    return c if c is not None and c is not dead else None


def said(c: Controller, text: str) -> bool:
    return any(text in line for line in c.lines())


def test_a_lost_run_is_rerun_once_across_a_leaders_death_and_a_restart(
    tmp_path: Path, moto: str
) -> None:
    with pair(tmp_path, moto, job_retry=True, lease_duration=4.0, poll_interval=2.0) as p:
        first = p.start("c0")
        leader = wait_until(p.leader, 60, "a leader")
        assert leader is first
        follower = p.start("c1")
        wait_until(lambda: p.following(follower, epoch(p)), 60, "a warm follower")

        runner = p.github.register_runner("ci-cpu-lost-runner", CPU)
        lost = p.github.queue_job("app", CPU, name="test (1)")
        run = p.github.job(lost).run_id
        legs = [p.github.queue_job("app", CPU, name=f"test ({i})", run_id=run) for i in (2, 3, 4)]
        p.github.assign_job(lost, runner)
        for c in (leader, follower):  # both polls see the run going: its legs queued
            wait_until(partial(sees_three_queued, c), 60, f"{c.name} saw the run")

        held: list[bool] = []

        def hold_the_ask(method: str, path: str) -> None:
            # The follower must see attempt 1 complete before GitHub makes attempt 2: the
            # poll finds a completed run when it drops out of the listings, and a run
            # re-run before the follower's next poll never does. Held under the client's
            # 10 s timeout.
            if method == "POST" and ASK.search(path) and not held:
                try:
                    held.append(bool(wait_until(partial(judged_lost, follower), 8, "")))
                except AssertionError:
                    held.append(False)

        killed = threading.Event()

        def kill_the_asker(method: str, path: str, status: int) -> bool:
            if method == "POST" and ASK.search(path) and status == 201 and not killed.is_set():
                killed.set()
                leader.proc.kill()  # GitHub made the attempt; its answer never arrives
                return True
            return False

        p.github.before_request = hold_the_ask
        p.github.before_reply = kill_the_asker
        fail_job(
            p.github,
            lost,
            annotations=[annotation(LOST.format(runner="ci-cpu-lost-runner"))],
            failed_step=False,
        )
        for leg in legs:  # fail-fast: GitHub cancels the other legs
            fail_job(p.github, leg, conclusion="cancelled", failed_step=False)

        wait_until(killed.is_set, 90, "the leader asked for the re-run")
        assert held == [True], "the follower did not judge the run within 8 s of the ask"
        p.kill(leader.name)
        successor = wait_until(partial(other_leader, p, leader), 60, "a new leader")
        assert successor is follower
        p.start("c2")  # the dead one's replacement
        wait_until(
            lambda: said(follower, f"re-run of app run {run} attempt 1 went through before"),
            90,
            "the new leader checked the unanswered re-run",
        )
        # As a follower it decided "rerun" tick after tick and asked nothing: it counted
        # nothing (it used to count every tick's decision as a re-run).
        assert counted_reruns(follower) == 0
        record = next(
            json.loads(str(i["value"]))
            for i in p.items("retry")
            if str(i["sk"]) == f"rerun:app#{run}#1"
        )
        assert record["asked"] is True and sorted(record["jobs"]) == sorted([lost, *legs])

    posts = [r for r in p.github.requests if r.method == "POST" and ASK.search(r.path)]
    assert [(r.status, ASK.search(r.path)[1]) for r in posts] == [(201, str(run))]  # type: ignore[index]
    assert p.github.run_reruns == [("app", run)]
    again = [j for j in p.github.jobs() if j.run_id == run and j.run_attempt == 2]
    assert sorted((j.name, j.status) for j in again) == [
        (f"test ({i})", "queued") for i in (1, 2, 3, 4)
    ]
    asked = [(c.name, a[3]) for c in p.all_controllers() for a in c.actions() if a[2] == "rerun"]
    assert asked == [("c0", f"app run {run}")]
