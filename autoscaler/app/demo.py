"""``ci-autoscaler demo``: the whole world on 127.0.0.1, no credentials, no network.

A fake GitHub with a swinging synthetic workload over CPU and GPU runner types; moto's
server with an Auto Scaling group per pool; a fleet emulator that turns launched instances
into runners after a boot delay and runs queued jobs on them; a local webhook sink that
receives the alerts. The real controller (GitHub adapter, alerting, scaler, AWS adapter)
runs against all of it, serves ``/metrics`` and the terminal redraws each tick: queues
rise, pools grow, queues drain, idle runners go, and an injected capacity error on the
GPU spot pool (accepted scale-ups that launch nothing, with a Failed scaling
activity, as real AWS reports it) makes the controller fail over to on-demand.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from autoscaler.app.httpserver import StatusServer
from autoscaler.app.report import format_table
from autoscaler.app.service import stop_on_signals
from autoscaler.config import Config, parse_config
from autoscaler.fakes.github import FakeGitHub
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

#: (runner type, labels, [(pool, max size)]) for the demo's world.
WORLD: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, int], ...]], ...] = (
    ("linux.4xlarge", ("self-hosted", "linux.4xlarge"), (("ci-cpu", 8),)),
    ("linux.2xlarge", ("self-hosted", "linux.2xlarge"), (("ci-cpu-small", 6),)),
    (
        "linux.g5.4xlarge.nvidia.gpu",
        ("self-hosted", "linux.g5.4xlarge.nvidia.gpu"),
        (("ci-gpu-spot", 4), ("ci-gpu-ondemand", 4)),
    ),
    (
        "linux.g4dn.12xlarge.nvidia.gpu",
        ("self-hosted", "linux.g4dn.12xlarge.nvidia.gpu"),
        (("ci-gpu-multi", 3),),
    ),
)
CAPACITY_FAULT_AT = 15.0
"""Seconds into the demo when the GPU spot pool runs out of capacity."""


class WebhookSink:
    """A local webhook receiver: keeps the last alert notifications it was sent."""

    def __init__(self) -> None:
        self.received: list[str] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    doc = json.loads(body)
                    sink.received.append(f"{doc.get('state')}: {doc.get('title')}")
                except ValueError:
                    sink.received.append("(unreadable notification)")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def demo_config(github_url: str, token: str, aws_url: str, sink_url: str, tick: float) -> Config:
    """The controller's config for the demo world, built like any user's config."""
    runner_types = {
        name: {
            "labels": list(labels),
            "pools": [pool for pool, _ in pools],
            "min_idle": 1,
            "max": sum(size for _, size in pools),
            "priority": 10 if "gpu" in name else 5,
            "idle_timeout": "20s",
            "boot_timeout": "30s",
        }
        for name, labels, pools in WORLD
    }
    rule = {
        "team": "demo-dev-infra",
        "priority": "P2",
        "runbook_url": "https://example.com/runbooks/ci-queue",
        "dashboard_url": "https://example.com/d/ci-autoscaler",
        "receivers": ["sink"],
        "repeat_interval": "10m",
    }
    return parse_config(
        {
            "poll_interval": f"{tick}s",
            "github": {"api_url": github_url, "owner": "demo-org", "token": token},
            "runner_types": runner_types,
            "budgets": {"gpus": {"max_instances": 9, "runner_types": ["*gpu*"]}},
            "state": {"path": ":memory:"},  # the demo leaves no files behind
            "aws": {"region": "us-east-1", "endpoint_url": aws_url},
            "scaling": {"capacity_backoff_initial": "30s", "capacity_backoff_max": "2m"},
            "alerts": {
                "rules": [
                    {
                        **rule,
                        "name": "Jobs queueing too long",
                        "description": "Jobs wait too long for a runner",
                        "per_runner_type": True,
                        "max_queue_size": 6,
                        "max_queue_time": "45s",
                    },
                ],
                "receivers": {"sink": {"type": "webhook", "url": sink_url, "timeout": "2s"}},
                "builtin": {"team": "demo-dev-infra", "receivers": ["sink"]},
            },
        },
        env={},
    )


@contextmanager
def demo_world(tick: float) -> Iterator[tuple[Config, FakeGitHub, Any, Any, WebhookSink]]:
    """Start every fake; yield (config, github, moto endpoint, fleet, sink); stop them all."""
    from autoscaler.sim.fleet import Fleet, PoolSpec, aws_clients, create_pools, start_moto_server  # noqa: PLC0415
    from autoscaler.sim.workload import Workload  # noqa: PLC0415

    with ExitStack() as stack:
        github = FakeGitHub(owner="demo-org")
        # The demo ticks every second, not every 30 s: a real token's hourly budget would
        # (rightly) stretch its polls. Its GitHub has no rate limit, as GHES by default.
        github.RATE_LIMIT = 1_000_000_000
        github.start()
        stack.callback(github.stop)
        moto, aws_url = start_moto_server()
        stack.callback(moto.stop)
        sink = WebhookSink()
        stack.callback(sink.stop)
        autoscaling, ec2 = aws_clients(aws_url)
        specs = [
            PoolSpec(pool, name, labels, max_size=size)
            for name, labels, pools in WORLD
            for pool, size in pools
        ]
        create_pools(autoscaling, ec2, specs)
        fleet = Fleet(github, autoscaling, specs, boot_delay=4.0, job_duration=lambda _: 12.0)
        workload = Workload(
            github,
            [(name, labels) for name, labels, _ in WORLD],
            seed=7,
            period=60.0,
            rate_scale=12.0,
            unmatched_per_minute=2.0,
        )
        config = demo_config(github.url, github.token, aws_url, sink.url, tick)
        yield config, github, (workload, autoscaling), fleet, sink


def _redraw(text: str) -> None:
    if sys.stdout.isatty():
        sys.stdout.write("\x1b[H\x1b[2J" + text)
    else:
        sys.stdout.write(text + "\n" + "-" * 72 + "\n")
    sys.stdout.flush()


def run_demo(duration: float | None, listen: str, tick: float = 2.0) -> int:
    """Run the demo until ``duration`` seconds pass or SIGINT/SIGTERM."""
    try:
        import moto  # noqa: F401, PLC0415
    except ImportError:
        print("the demo needs moto: pip install 'ci-autoscaler[demo]'", file=sys.stderr)
        return 1
    import boto3  # noqa: PLC0415

    from autoscaler.app.wiring import build_runtime  # noqa: PLC0415
    from autoscaler.scale.aws.asg import AwsAsgPool  # noqa: PLC0415
    from autoscaler.sim.aws_faults import CapacityOutage  # noqa: PLC0415

    stop = threading.Event()
    stop_on_signals(stop)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs every call
    with demo_world(tick) as (config, _github, (workload, _asg), fleet, sink):
        metrics = Metrics()
        session = boto3.session.Session(
            aws_access_key_id="demo",
            aws_secret_access_key="demo",  # noqa: S106 - moto accepts any credentials
            region_name="us-east-1",
        )
        pool = AwsAsgPool(config.aws, metrics, session=session)
        runtime = build_runtime(config, metrics, pool=pool)
        host, _, port = listen.rpartition(":")
        try:
            server = StatusServer(runtime.controller, metrics, host, int(port))
        except OSError:
            server = StatusServer(runtime.controller, metrics, host or "127.0.0.1", 0)
        server.start()
        started = time.monotonic()
        outage: CapacityOutage | None = None
        try:
            while not stop.is_set():
                elapsed = time.monotonic() - started
                if duration is not None and elapsed >= duration:
                    break
                if outage is None and elapsed >= CAPACITY_FAULT_AT:
                    outage = CapacityOutage("ci-gpu-spot").install(pool.autoscaling)
                now = datetime.now(UTC)
                workload.step(now)
                events = fleet.tick(now)
                result = runtime.controller.tick(now)
                lines = [
                    f"ci-autoscaler demo  t={elapsed:5.1f}s  metrics: "
                    f"http://{host or '127.0.0.1'}:{server.port}/metrics  (Ctrl-C stops)",
                    format_table(result),
                    f"fleet: +{len(events.registered)} runners booted, "
                    f"{len(events.assigned)} jobs started, {len(events.completed)} finished, "
                    f"{len(events.removed)} runners gone; busy runners killed: "
                    f"{fleet.busy_terminations}",
                ]
                if outage is not None:
                    lines.append(
                        "injected: ci-gpu-spot accepts scale-ups but launches nothing (a Failed"
                        " scaling activity, as AWS reports InsufficientInstanceCapacity)"
                        " -> GPU demand fails over to ci-gpu-ondemand"
                    )
                lines.append("alert notifications received by the webhook sink:")
                lines.extend(f"  {n}" for n in sink.received[-6:] or ["  (none yet)"])
                _redraw("\n".join(lines) + "\n")
                stop.wait(max(0.0, tick - (time.monotonic() - started - elapsed)))
        finally:
            server.stop()
            runtime.close()
    return 0 if fleet.busy_terminations == 0 else 1
