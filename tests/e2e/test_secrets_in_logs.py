"""No secret in any output, at ``--log-level debug``: `run` and `once` as subprocesses.

The world holds every kind of secret the controller handles: its GitHub token, a webhook
secret, a Slack receiver (its URL's path is its key), a generic webhook receiver with
basic auth, an ephemeral pool (a JIT config per instance) and a persistent one (a
registration token per instance), both handed over through SSM on moto's server, where
botocore's debug output prints every request body. Alerts fire, so both receivers are
called. Every byte both commands write to stdout and stderr is searched for every value
(and for the forms a library may print it in); the debug output must be there, and so
must the redaction marks that replaced them.
"""

from __future__ import annotations

import base64
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from autoscaler.app.demo_world import WebhookSink
from autoscaler.fakes.github import FakeGitHub
from autoscaler.secrets import REDACTED
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools, reset_moto_server
from tests.e2e.harness import CPU, GPU, free_port, wait_for

pytestmark = pytest.mark.e2e

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
PATH = "/ci-autoscaler/jit"
DEBUG = [sys.executable, "-m", "autoscaler", "--log-level", "debug"]


@pytest.fixture
def sink() -> Iterator[WebhookSink]:
    s = WebhookSink()
    yield s
    s.stop()


@pytest.fixture
def pools(moto_endpoint: str) -> str:
    """A persistent CPU pool and an ephemeral GPU pool, each with a running instance."""
    reset_moto_server(moto_endpoint)
    autoscaling, ec2 = aws_clients(moto_endpoint)
    create_pools(
        autoscaling,
        ec2,
        [
            PoolSpec("ci-cpu", "linux.4xlarge", tuple(CPU), max_size=2),
            PoolSpec("ci-gpu", "linux.g5.4xlarge.nvidia.gpu", tuple(GPU), max_size=2),
        ],
    )
    for name in ("ci-cpu", "ci-gpu"):
        autoscaling.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=1)
    return moto_endpoint


class World:
    def __init__(self, tmp: Path, sink: WebhookSink, aws_url: str) -> None:
        self.token = "ghp_" + secrets.token_hex(18)
        self.webhook_secret = secrets.token_urlsafe(24)
        self.slack_path = f"/services/T{secrets.token_hex(4)}/B{secrets.token_hex(4)}/" + (
            secrets.token_urlsafe(18)
        )
        self.user, self.password = "alerts-bot", "p@ss/" + secrets.token_urlsafe(12)
        base = sink.url.removesuffix("/alerts")
        self.slack_url = base + self.slack_path
        host = base.removeprefix("http://")
        self.basic_url = f"http://{self.user}:{quote(self.password, safe='')}@{host}/hook"
        self.github = FakeGitHub(owner="leak-org", token=self.token)
        self.github.start()
        self.github.add_repo("app")
        for labels in (CPU, GPU):
            for _ in range(2):
                self.github.queue_job("app", labels)
        self.configs = [self._write(tmp, "once", aws_url), self._write(tmp, "run", aws_url)]
        self.env = {
            **os.environ,
            **AWS_ENV,
            "LEAK_TOKEN": self.token,
            "LEAK_WEBHOOK_SECRET": self.webhook_secret,
            "LEAK_SLACK_URL": self.slack_url,
            "LEAK_HOOK_URL": self.basic_url,
        }

    def _write(self, tmp: Path, name: str, aws_url: str) -> Path:
        """The config of one command (each with its own state: both alert, both hand over)."""
        path = tmp / f"{name}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "poll_interval": "1s",
                    "listen": f"127.0.0.1:{free_port()}",
                    "github": {
                        "api_url": self.github.url,
                        "owner": "leak-org",
                        "token": "${LEAK_TOKEN}",
                    },
                    "runner_types": {
                        "linux.4xlarge": {"labels": CPU, "pools": ["ci-cpu"], "mode": "persistent"},
                        "linux.g5.4xlarge.nvidia.gpu": {
                            "labels": GPU,
                            "pools": ["ci-gpu"],
                            "mode": "ephemeral",
                        },
                    },
                    "scaling": {"enabled": True},
                    "aws": {"region": "us-east-1", "endpoint_url": aws_url},
                    "jit": {"parameter_path": PATH},
                    "state": {"path": str(tmp / f"{name}.db")},
                    "webhook": {
                        "listen": f"127.0.0.1:{free_port()}",
                        "secret": "${LEAK_WEBHOOK_SECRET}",
                    },
                    "alerts": {
                        "rules": [
                            {
                                "name": "Jobs queueing",
                                "team": "dev-infra",
                                "priority": "P2",
                                "description": "Jobs wait",
                                "max_queue_size": 0,
                                "receivers": ["slack", "hook"],
                            }
                        ],
                        "receivers": {
                            "slack": {"type": "slack", "url": "${LEAK_SLACK_URL}"},
                            "hook": {"type": "webhook", "url": "${LEAK_HOOK_URL}"},
                        },
                        "builtin": {"receivers": ["hook"]},
                    },
                }
            )
        )
        return path

    def secrets(self) -> dict[str, str]:
        """Every value that must not be printed, by what it is."""
        basic = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        out = {
            "github token": self.token,
            "webhook secret": self.webhook_secret,
            "slack url": self.slack_url,
            "slack key (its path)": self.slack_path,
            "basic-auth url": self.basic_url,
            "basic-auth password": self.password,
            "basic-auth password, percent-encoded": quote(self.password, safe=""),
            "basic-auth header": basic,
        }
        for n, config in enumerate(self.github.jit.configs):
            out[f"JIT config {n}"] = config
        for n, token in enumerate(self.github.jit.tokens):
            out[f"registration token {n}"] = token
        return out


def run_for(world: World, tmp: Path, until: object, seconds: float = 40) -> str:
    """`run --log-level debug` until ``until()`` holds; everything it wrote."""
    out, err = tmp / "run.out", tmp / "run.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [*DEBUG, "run", "--config", str(world.configs[1])],
            stdout=stdout,
            stderr=stderr,
            env=world.env,
        )
        try:
            wait_for(until, seconds, "the run to hand over credentials and alert")
            time.sleep(2)  # a few more ticks: deliveries, parameters deleted, retries
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return out.read_text() + err.read_text()


def test_no_secret_is_printed_by_run_or_once_at_debug(
    tmp_path: Path, sink: WebhookSink, pools: str
) -> None:
    world = World(tmp_path, sink, pools)
    try:
        once = subprocess.run(
            [*DEBUG, "once", "--config", str(world.configs[0]), "--output", "json"],
            capture_output=True,
            text=True,
            env=world.env,
            timeout=120,
            check=False,
        )
        assert once.returncode == 0, once.stderr[-3000:]
        made, alerted = len(world.github.jit.configs), len(sink.received)
        run = run_for(
            world,
            tmp_path,
            lambda: len(world.github.jit.configs) > made and len(sink.received) >= 2 * alerted,
        )
    finally:
        world.github.stop()
    outputs = {"once": once.stdout + once.stderr, "run": run}
    values = world.secrets()
    assert any(k.startswith("JIT config") for k in values), "no JIT config was made"
    assert any(k.startswith("registration token") for k in values), "no token was made"
    for name, text in outputs.items():
        assert "botocore" in text and "PutParameter" in text, f"{name}: no SDK debug output"
        leaked = [what for what, value in values.items() if value in text]
        assert leaked == [], f"{name} printed: {leaked}"
        assert REDACTED in text, f"{name}: nothing was redacted (were secrets ever logged?)"
