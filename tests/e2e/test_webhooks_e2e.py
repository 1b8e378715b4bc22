"""`ci-autoscaler run` with webhooks, end to end: the fake GitHub delivers signed
``workflow_job`` events to the controller's listener and moto's server holds the pools.

With ``poll_interval: 60s`` a scale-up within seconds can only come from a webhook; with a
share of deliveries dropped, the reconcile poll counts each dropped job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_webhooks import Faults
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools
from tests.e2e.harness import CPU, free_port, running_controller, wait_for, write_config

SECRET = "e2e-webhook-secret-value"
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture
def moto_url(moto_endpoint: str) -> str:
    autoscaling, ec2 = aws_clients(moto_endpoint)
    create_pools(autoscaling, ec2, [PoolSpec("ci-cpu", "linux.4xlarge", tuple(CPU), max_size=20)])
    return moto_endpoint


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub(owner="e2e-org", token="e2e-token")
    fake.RATE_LIMIT = 1_000_000_000
    fake.start()
    fake.add_repo("app")
    yield fake
    if fake.webhooks is not None:
        fake.webhooks.close()
    fake.stop()


def desired(aws_url: str) -> int:
    autoscaling, _ = aws_clients(aws_url)
    (group,) = autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
    return int(group["DesiredCapacity"])


def metric(base: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def config(tmp: Path, github_url: str, aws_url: str, hook_port: int, **timing: str) -> Path:
    return write_config(
        tmp,
        github_url,
        free_port(),
        poll_interval=timing.get("poll", "60s"),
        runner_types={"linux.4xlarge": {"labels": CPU, "pools": ["ci-cpu"], "max": 20}},
        scaling={"enabled": True},
        aws={"region": "us-east-1", "endpoint_url": aws_url},
        webhook={
            "listen": f"127.0.0.1:{hook_port}",
            "secret": "${E2E_HOOK_SECRET}",
            "reconcile_interval": timing.get("reconcile", "5m"),
        },
    )


def test_a_queued_webhook_scales_up_long_before_the_next_poll(
    tmp_path: Path, github: FakeGitHub, moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2E_HOOK_SECRET", SECRET)
    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)
    hook_port = free_port()
    path = config(tmp_path, github.url, moto_url, hook_port)
    with running_controller(path) as (proc, base):
        wait_for(lambda: httpx.get(f"{base}/readyz", timeout=2).status_code == 200, 20, "ready")
        sender = github.send_webhooks(
            f"http://127.0.0.1:{hook_port}/github/webhook", SECRET.encode()
        )
        assert desired(moto_url) == 0
        started = time.monotonic()
        for _ in range(3):
            github.queue_job("app", CPU)
        wait_for(lambda: desired(moto_url) == 3, 10, "desired capacity 3")
        reacted = time.monotonic() - started
        assert reacted < 10, "the next poll is 60 s away: only the webhook explains this"
        assert [s.status for s in sender.sent] == [202, 202, 202]
        assert metric(base, "ci_autoscaler_webhook_events_total", result="accepted") == 3
        assert metric(base, "ci_autoscaler_reaction_seconds_count") == 3
        # the metrics and status endpoints are untouched; the listener serves nothing else
        assert httpx.get(f"http://127.0.0.1:{hook_port}/metrics", timeout=5).status_code == 404
        forged = httpx.post(
            f"http://127.0.0.1:{hook_port}/github/webhook",
            content=b"{}",
            headers={
                "X-GitHub-Event": "workflow_job",
                "X-Hub-Signature-256": "sha256=00",
                "Content-Type": "application/json",
            },
            timeout=5,
        )
        assert forged.status_code == 401
    logs = proc.stderr.read() if proc.stderr is not None else ""
    assert "webhook" in logs and SECRET not in logs
    print(f"queued -> SetDesiredCapacity seen on moto after {reacted:.2f}s")


def test_dropped_deliveries_are_counted_by_the_reconcile(
    tmp_path: Path, github: FakeGitHub, moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2E_HOOK_SECRET", SECRET)
    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)
    hook_port = free_port()
    path = config(tmp_path, github.url, moto_url, hook_port, poll="1s", reconcile="4s")
    with running_controller(path) as (_, base):
        wait_for(lambda: metric(base, "ci_autoscaler_webhook_reconciles_total") >= 1, 20, "poll")
        sender = github.send_webhooks(
            f"http://127.0.0.1:{hook_port}/github/webhook",
            SECRET.encode(),
            faults=Faults(drop=0.4, duplicate=0.2, reorder=0.2, seed=3),
        )
        for _ in range(12):
            github.queue_job("app", CPU)
        assert sender.wait_idle()
        dropped = len(sender.dropped)
        assert 0 < dropped < 12
        wait_for(
            lambda: (
                metric(base, "ci_autoscaler_webhook_reconcile_corrections_total", kind="missed")
                >= dropped
            ),
            20,
            f"{dropped} missed jobs counted",
        )
        wait_for(lambda: desired(moto_url) == 12, 10, "every job asked for, dropped ones too")
        assert (
            metric(base, "ci_autoscaler_webhook_reconcile_corrections_total", kind="missed")
            == dropped
        )
        assert metric(base, "ci_autoscaler_webhook_events_total", result="duplicate") >= 1


def test_a_taken_webhook_port_is_a_clear_error(tmp_path: Path) -> None:
    """Not a traceback: one line naming the address, exit 1."""
    import socket  # noqa: PLC0415

    from tests.e2e.harness import cli  # noqa: PLC0415

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = config(tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9", port)
        done = cli("run", "--config", str(path), env={"E2E_HOOK_SECRET": SECRET}, timeout=60)
    assert done.returncode == 1, done.stderr
    assert f"cannot listen for webhooks on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stderr
