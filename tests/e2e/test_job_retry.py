"""Jobs lost to infrastructure, end to end: the controller (built by the app's wiring) polls
the real fake GitHub over HTTP, reads AWS's sample Spot warning from an SQS queue on moto's
server and scales the Auto Scaling groups there; alerts go to a local webhook.

- a job whose Spot instance was interrupted has its run re-run exactly once (and, when it
  is lost again on attempt 2, "Job retries exhausted" is sent once, naming repo, run,
  job, runner and the evidence);
- a fail-fast matrix whose one leg a Spot reclaim took, its three siblings cancelled
  after it, comes back as one new attempt with all four legs queued, once; a matrix with
  a leg failed on its own (exit code 1), and one a person cancelled before the loss, are
  not re-run, and the tick's ``once --output json`` says why;
- a user's failure is never re-run;
- a repository where GitHub answers the re-run with 403 alerts once and is left alone.

Virtual time: the fake's clock and the ticks share it; nothing sleeps but the waits on the
webhook's deliveries (deadlines, not sleeps).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.alerting.job_retry_alerts import DENIED_RULE, EXHAUSTED_RULE
from autoscaler.app.report import to_json
from autoscaler.app.wiring import Runtime, build_runtime
from autoscaler.config import Config, parse_config
from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_reruns import EXIT, LOST, annotation, fail_job, refuse_reruns
from autoscaler.scale.scaler import Scaler
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools, moto_session
from autoscaler.telemetry import Metrics
from tests.adapters.aws_events import body, spot_warning

GPU = ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]
T0 = datetime.now(UTC).replace(microsecond=0)


class Sink:
    """A webhook receiver keeping every notification's JSON."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                sink.received.append(json.loads(raw))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def titled(self, rule: str) -> list[dict[str, Any]]:
        return [n for n in self.received if rule in str(n.get("title"))]

    def wait_for(self, rule: str, count: int, deadline: float = 10.0) -> list[dict[str, Any]]:
        end = time.monotonic() + deadline
        while time.monotonic() < end and len(self.titled(rule)) < count:
            time.sleep(0.05)
        return self.titled(rule)


@dataclass
class World:
    fake: FakeGitHub
    runtime: Runtime
    metrics: Metrics
    sink: Sink
    sqs: Any
    queue_url: str
    instances: list[str]
    now: datetime = T0
    runners: dict[str, int] = field(default_factory=dict)

    decided: list[dict[str, Any]] = field(default_factory=list)
    """Every tick's ``run_retries`` (``once --output json``), in order."""

    def tick(self, minutes: float = 1.0) -> None:
        self.now += timedelta(minutes=minutes)
        result = self.runtime.controller.tick(self.now)
        self.decided += to_json(result).get("run_retries", [])

    def running(self, instance: str, name: str, run_id: int | None = None) -> int:
        runner = self.runners.get(instance)
        if runner is None:
            runner = self.fake.register_runner(f"ci-gpu-{instance}", GPU)
            self.runners[instance] = runner
        job = self.fake.queue_job("app", GPU, name=name, run_id=run_id)
        self.fake.assign_job(job, runner)
        return job

    def retries(self, reason: str, result: str) -> float:
        labels = {"runner_type": "gpu", "reason": reason, "result": result}
        value = self.metrics.registry.get_sample_value("ci_autoscaler_job_retries_total", labels)
        return value or 0.0


def config(fake: FakeGitHub, sink: Sink, aws: str, queue: str, tmp: str) -> Config:
    return parse_config(
        {
            "poll_interval": "5s",  # the queue's long poll: a tenth of it (no wait)
            "github": {"api_url": fake.url, "owner": "e2e-org", "token": "e2e-token"},
            "runner_types": {
                "gpu": {"labels": GPU, "pools": ["ci-gpu-spot", "ci-gpu"], "idle_timeout": "1h"}
            },
            "aws": {"region": "us-east-1", "endpoint_url": aws, "interruption_queue_url": queue},
            "state": {"path": f"{tmp}/state.db"},
            "job_retry": {"enabled": True},
            "alerts": {
                "receivers": {"hook": {"type": "webhook", "url": sink.url}},
                "builtin": {"receivers": ["hook"], "unmatched_jobs": False, "clock_skew_max": "0s"},
            },
        },
        env={},
    )


@pytest.fixture
def world(moto_endpoint: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    autoscaling, ec2 = aws_clients(moto_endpoint)
    specs = [PoolSpec("ci-gpu-spot", "gpu", tuple(GPU)), PoolSpec("ci-gpu", "gpu", tuple(GPU))]
    create_pools(autoscaling, ec2, specs)
    autoscaling.set_desired_capacity(AutoScalingGroupName="ci-gpu-spot", DesiredCapacity=2)
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["ci-gpu-spot"])
    instances = sorted(i["InstanceId"] for i in group["AutoScalingGroups"][0]["Instances"])
    sqs = moto_session().client("sqs", endpoint_url=moto_endpoint)
    queue_url = sqs.create_queue(QueueName="ci-autoscaler-interruptions")["QueueUrl"]
    sink = Sink()
    holder: list[World] = []
    fake = FakeGitHub(owner="e2e-org", token="e2e-token", clock=lambda: holder[0].now)
    fake.start()
    fake.add_repo("app")
    metrics = Metrics(CollectorRegistry())
    runtime = build_runtime(config(fake, sink, moto_endpoint, queue_url, str(tmp_path)), metrics)
    holder.append(World(fake, runtime, metrics, sink, sqs, queue_url, instances))
    try:
        yield holder[0]
    finally:
        runtime.close()
        fake.stop()
        sink.server.shutdown()


def test_a_spot_interrupted_job_is_rerun_exactly_once_and_a_users_failure_never(
    world: World,
) -> None:
    spot, other = world.instances
    lost = world.running(spot, "test (gpu, 1)")
    users = world.running(other, "test (gpu, 2)")
    world.tick()  # both runs seen running
    world.sqs.send_message(QueueUrl=world.queue_url, MessageBody=body(spot_warning(spot)))
    world.now += timedelta(minutes=2)
    fail_job(
        world.fake,
        lost,
        annotations=[annotation(LOST.format(runner=f"ci-gpu-{spot}"))],
        failed_step=False,
    )
    fail_job(world.fake, users, annotations=[annotation(EXIT.format(code=137))])
    world.tick()
    for _ in range(6):  # a few more ticks: past the settle time, and idempotent
        world.tick()
    run = world.fake.job(lost).run_id
    assert world.fake.run_reruns == [("app", run)]
    assert world.retries("spot_interruption", "rerun") == 1
    assert world.retries("user", "skip") == 1
    scaler = world.runtime.controller.scaler
    warned = world.now - timedelta(minutes=5)
    assert isinstance(scaler, Scaler) and scaler.state.in_backoff("ci-gpu-spot", warned)
    interrupted = world.metrics.registry.get_sample_value(
        "ci_autoscaler_interruptions_total", {"pool": "ci-gpu-spot", "kind": "spot_interruption"}
    )
    assert interrupted == 1

    # attempt 2 runs on the other instance and is lost too: retries exhausted, said once
    (second,) = [j for j in world.fake.jobs() if j.run_attempt == 2]
    world.fake.assign_job(second.id, world.runners[other])
    world.tick()
    fail_job(
        world.fake,
        second.id,
        annotations=[annotation(LOST.format(runner=f"ci-gpu-{other}"))],
        failed_step=False,
    )
    for _ in range(3):
        world.tick()
    assert world.fake.run_reruns == [("app", run)]
    (alert,) = world.sink.wait_for(EXHAUSTED_RULE, 1)
    assert alert["state"] == "FIRING"
    for part in (
        "app",
        f"run {second.run_id}",
        f"job {second.id}",
        f"ci-gpu-{other}",
        "lost communication",
    ):
        assert part in alert["text"], part
    world.tick()
    assert len(world.sink.titled(EXHAUSTED_RULE)) == 1


def test_a_403_alerts_once_and_stops_trying(world: World) -> None:
    refuse_reruns(world.fake, 403)
    first = world.running(world.instances[0], "build 1")
    second = world.running(world.instances[1], "build 2")
    world.tick()
    fail_job(
        world.fake, first, annotations=[annotation(LOST.format(runner="x"))], failed_step=False
    )
    world.tick()
    fail_job(
        world.fake, second, annotations=[annotation(LOST.format(runner="y"))], failed_step=False
    )
    for _ in range(4):
        world.tick()
    posts = world.fake.count(403, r"/actions/runs/\d+/rerun-failed-jobs")
    assert posts == 1
    (alert,) = world.sink.wait_for(DENIED_RULE, 1)
    assert alert["state"] == "FIRING" and "Actions: read and write" in alert["text"]
    world.tick()
    assert len(world.sink.titled(DENIED_RULE)) == 1
    assert world.fake.run_reruns == []


def matrix(world: World, instance: str, name: str) -> tuple[int, list[int]]:
    """A matrix of four legs in one run: leg 1 running on ``instance``, the others queued."""
    first = world.running(instance, f"{name} (1)")
    run = world.fake.job(first).run_id
    legs = [first] + [
        world.fake.queue_job("app", GPU, name=f"{name} ({i})", run_id=run) for i in (2, 3, 4)
    ]
    return run, legs


def cancel(world: World, jobs: list[int]) -> None:
    for job in jobs:
        fail_job(world.fake, job, conclusion="cancelled", failed_step=False)


def test_a_fail_fast_matrix_comes_back_whole_and_only_when_the_loss_caused_it(
    world: World,
) -> None:
    """The story: a Spot reclaim took one leg of a fail-fast matrix; GitHub cancelled the
    other three. Re-running the lost leg alone left them cancelled and the run red. Now
    the run is re-run once (``rerun-failed-jobs``): all four legs are queued in attempt 2.
    Beside it, a matrix with a leg that failed with exit code 1, and one a person cancelled
    before the loss: not re-run, and the tick's JSON says why."""
    spot, other = world.instances
    lost_run, legs = matrix(world, spot, "test")
    own_run, own_legs = matrix(world, other, "lint")
    world.tick()  # the runs seen running
    world.sqs.send_message(QueueUrl=world.queue_url, MessageBody=body(spot_warning(spot)))
    world.now += timedelta(minutes=2)
    fail_job(world.fake, legs[0], annotations=[], failed_step=False)  # the machine is gone
    world.now += timedelta(seconds=3)
    cancel(world, legs[1:])  # fail-fast
    fail_job(world.fake, own_legs[0], annotations=[annotation(EXIT.format(code=1))])
    cancel(world, own_legs[1:])
    world.tick()
    # a third matrix: a person cancels two legs, then its running leg's runner is lost
    human_run, human_legs = matrix(world, other, "docs")
    world.tick()
    cancel(world, human_legs[2:])
    world.now += timedelta(seconds=30)
    fail_job(
        world.fake,
        human_legs[0],
        annotations=[annotation(LOST.format(runner=f"ci-gpu-{other}"))],
        failed_step=False,
    )
    cancel(world, human_legs[1:2])
    for _ in range(5):  # past the settle time, and idempotent
        world.tick()

    assert world.fake.run_reruns == [("app", lost_run)]
    again = [j for j in world.fake.jobs() if j.run_id == lost_run and j.run_attempt == 2]
    assert sorted((j.name, j.status) for j in again) == [
        (f"test ({i})", "queued") for i in (1, 2, 3, 4)
    ]
    decided = {d["run_id"]: d for d in world.decided}
    lost = decided[lost_run]
    assert (lost["verdict"], lost["result"], lost["asked"]) == (
        "lost",
        "rerun",
        "rerun-failed-jobs",
    )
    assert [j["reason"] for j in lost["lost"]] == ["spot_interruption"]
    assert [j["job"] for j in lost["cancelled_by_loss"]] == [f"test ({i})" for i in (2, 3, 4)]
    own = decided[own_run]
    assert (own["verdict"], own["result"], own["asked"]) == ("own_failure", "skip", None)
    assert "lint (1)" in own["why"] and "exit code 1" in own["why"]
    human = decided[human_run]
    assert (human["verdict"], human["result"]) == ("cancelled_before_loss", "skip")
    assert "docs (3)" in human["why"] and "before the first loss" in human["why"]
    assert [j["job"] for j in human["cancelled_by_loss"]] == ["docs (2)"]
    runs = world.metrics.registry.get_sample_value(
        "ci_autoscaler_job_retry_runs_total", {"verdict": "lost", "result": "rerun"}
    )
    assert runs == 1
