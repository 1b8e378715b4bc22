"""`once` acting for real: alerts to a local webhook and decisions against moto's server;
`--dry-run` delivers nothing and changes nothing; `alerts test` reaches a receiver."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.app.demo_world import WebhookSink
from autoscaler.sim.fleet import (
    PoolSpec,
    aws_clients,
    create_pools,
)
from tests.e2e.harness import CPU, GPU, ONE_TICK, cli, free_port, seeded_github, write_config

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture
def sink() -> Iterator[WebhookSink]:
    s = WebhookSink()
    yield s
    s.stop()


@pytest.fixture
def moto_url(moto_endpoint: str) -> str:
    url = moto_endpoint
    autoscaling, ec2 = aws_clients(url)
    create_pools(
        autoscaling,
        ec2,
        [
            PoolSpec("ci-cpu", "linux.4xlarge", tuple(CPU), max_size=5),
            PoolSpec("ci-gpu", "linux.g5.4xlarge.nvidia.gpu", tuple(GPU), max_size=5),
        ],
    )
    return url


def acting_config(tmp: Path, github_url: str, sink_url: str, aws_url: str) -> Path:
    return write_config(
        tmp,
        github_url,
        free_port(),
        **ONE_TICK,
        runner_types={
            "linux.4xlarge": {"labels": CPU, "pools": ["ci-cpu"]},
            "linux.g5.4xlarge.nvidia.gpu": {"labels": GPU, "pools": ["ci-gpu"], "max": 2},
        },
        scaling={"enabled": True},
        aws={"region": "us-east-1", "endpoint_url": aws_url},
        alerts={
            "rules": [
                {
                    "name": "Jobs queueing too long",
                    "team": "pytorch-dev-infra",
                    "priority": "P2",
                    "description": "Jobs wait too long for a runner",
                    "max_queue_size": 10,
                    "max_queue_time": "60m",
                    "receivers": ["hook"],
                }
            ],
            "receivers": {"hook": {"type": "webhook", "url": sink_url}},
            "builtin": {"receivers": ["hook"], "unmatched_jobs": False},
        },
    )


def desired(aws_url: str) -> dict[str, int]:
    autoscaling, _ = aws_clients(aws_url)
    groups = autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
    return {g["AutoScalingGroupName"]: g["DesiredCapacity"] for g in groups}


@pytest.mark.parametrize("dry_run", [False, True], ids=["acts", "dry-run"])
def test_once_alerts_and_scales(
    tmp_path: Path, sink: WebhookSink, moto_url: str, dry_run: bool
) -> None:
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=62)
    try:
        config = acting_config(tmp_path, fake.url, sink.url, moto_url)
        flags = ["--dry-run"] if dry_run else []
        result = cli("once", "--config", str(config), "--output", "json", *flags, env=AWS_ENV)
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)

    [alert] = doc["alerts"]
    assert alert["state"] == "firing" and alert["title"] == "[P2] Jobs queueing too long"
    assert "max_queue_size=3, max_queue_time_mins=62, queue_size_threshold=0, " in alert["text"]
    assert alert["values"]["threshold_breached"] == 1

    decisions = {d["pool"]: d for d in doc["decisions"]}
    assert decisions["ci-gpu"]["desired"] == 2, "3 queued GPU jobs, clamped to max 2"
    assert decisions["ci-cpu"]["desired"] == 2, "2 queued CPU jobs (the one runner is not ours)"
    assert set(decisions["ci-gpu"]) >= {"runner_type", "pool", "current", "desired", "reason"}

    causes = {t["name"]: [c["code"] for c in t["causes"]] for t in doc["runner_types"]}
    if dry_run:
        assert sink.received == []
        assert desired(moto_url) == {"ci-cpu": 0, "ci-gpu": 0}
        assert causes["linux.g5.4xlarge.nvidia.gpu"] == ["dry_run"]
    else:
        [received] = sink.received
        assert received.startswith(
            "FIRING: [P2] Jobs queueing too long"
            " | Cause: at_max (linux.g5.4xlarge.nvidia.gpu 2/2 instances); "
        ), received
        assert desired(moto_url) == {"ci-cpu": 2, "ci-gpu": 2}
        assert causes["linux.g5.4xlarge.nvidia.gpu"] == ["at_max"]
    assert "idle_runners_not_assigned" in causes["linux.4xlarge"]  # its one runner is idle


def test_alerts_test_sends_firing_then_resolved(tmp_path: Path, sink: WebhookSink) -> None:
    config = write_config(
        tmp_path,
        "http://127.0.0.1:1",
        free_port(),
        alerts={"receivers": {"hook": {"type": "webhook", "url": sink.url}}},
    )
    result = cli("alerts", "test", "hook", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["hook: FIRING: sent", "hook: RESOLVED: sent"]
    assert [r.split(":")[0] for r in sink.received] == ["FIRING", "RESOLVED"]
    unknown = cli("alerts", "test", "nobody", "--config", str(config))
    assert unknown.returncode == 2 and "unknown receiver 'nobody'" in unknown.stderr


def test_alerts_test_fails_when_the_receiver_is_down(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        "http://127.0.0.1:1",
        free_port(),
        alerts={
            "receivers": {
                "hook": {
                    "type": "webhook",
                    "url": f"http://127.0.0.1:{free_port()}/x",
                    "max_attempts": 1,
                }
            }
        },
    )
    result = cli("alerts", "test", "hook", "--config", str(config))
    assert result.returncode == 1
    assert "hook: FIRING: failed" in result.stdout


def test_a_second_process_does_not_page_again(
    tmp_path: Path, sink: WebhookSink, moto_url: str
) -> None:
    """Two `once` runs share the state file: the second continues the first's alert."""
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=62)
    try:
        config = acting_config(tmp_path, fake.url, sink.url, moto_url)
        for _ in range(2):
            result = cli("once", "--config", str(config), "--output", "json", env=AWS_ENV)
            assert result.returncode == 0, result.stderr
            assert json.loads(result.stdout)["alerts"][0]["state"] == "firing"
    finally:
        fake.stop()
    assert [r.split(" | ")[0] for r in sink.received] == ["FIRING: [P2] Jobs queueing too long"]
    assert (tmp_path / "state.db").exists()


def test_explain_one_dry_run_tick_per_runner_type(tmp_path: Path, moto_url: str) -> None:
    """`explain` says why jobs wait, per runner type, and changes nothing."""
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=62)
    fake.queue_job("app", ["self-hosted", "linux.arm64"])
    try:
        config = acting_config(tmp_path, fake.url, "http://127.0.0.1:9/x", moto_url)
        gpu = "linux.g5.4xlarge.nvidia.gpu"
        as_json = cli("explain", gpu, "--config", str(config), "--output", "json", env=AWS_ENV)
        text = cli("explain", "--config", str(config), env=AWS_ENV)
        unknown = cli("explain", "linux.nope", "--config", str(config), env=AWS_ENV)
    finally:
        fake.stop()
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert list(doc) == ["runner_types", "github_poll"]  # how often GitHub is read
    assert (
        doc["github_poll"]["staleness_limit_seconds"] > doc["github_poll"]["poll_interval_seconds"]
    )
    [entry] = doc["runner_types"]
    assert list(entry) == ["name", "queue_size", "max_queue_time_seconds", "causes", "pools"]
    assert (entry["name"], entry["queue_size"]) == (gpu, 3)
    assert entry["max_queue_time_seconds"] >= 62 * 60
    assert entry["causes"] == [
        {"code": "dry_run", "detail": "+2 in ci-gpu planned, not asked (dry run)"}
    ]
    [pool] = entry["pools"]
    assert pool["name"] == "ci-gpu" and pool["max_size"] == 5 and pool["desired"] == 0
    assert pool["decision"]["action"] == "scale_up" and pool["decision"]["desired"] == 2
    assert desired(moto_url) == {"ci-cpu": 0, "ci-gpu": 0}

    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert f"{gpu}: 3 queued, oldest waiting 1h02m" in out
    assert "  pool ci-gpu: desired 0, in service 0, pending 0, MaxSize 5" in out
    assert "    dry_run: +2 in ci-gpu planned, not asked (dry run)" in out
    assert "(unmatched): 1 queued" in out
    assert "    no_runner_type: 1 queued job no runner type serves, by labels:" in out
    assert "[linux.arm64, self-hosted] x1" in out
    assert "  decision ci-gpu: scale_up -> 2: demand 3" in out
    assert unknown.returncode == 2 and "unknown runner type 'linux.nope'" in unknown.stderr
