"""The demo's world: its runner types and pools, the controller's config for them, and
every fake started on 127.0.0.1 (the fake GitHub, moto's server, the fleet emulator, the
workload, the alert sink).

Apart from :mod:`autoscaler.app.demo` (the script and its screen loop) because this is
*what* the demo runs against and that is *how* it tells the story; tests start pieces of
the world (the sink, the workload's shape) without the loop.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from autoscaler.app import demo_screen as ui
from autoscaler.config import Config, parse_config
from autoscaler.fakes.github import FakeGitHub

#: The demo's one logger: its log panel shows this logger's records.
log = logging.getLogger("autoscaler.app.demo")

#: (runner type, labels, [(pool, max size)]) for the demo's world.
WORLD: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, int], ...]], ...] = (
    ("linux.4xlarge", ("self-hosted", "linux.4xlarge"), (("ci-cpu", 8),)),
    ("linux.2xlarge", ("self-hosted", "linux.2xlarge"), (("ci-cpu-small", 5),)),
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
EPHEMERAL_TYPES = frozenset({"linux.g4dn.12xlarge.nvidia.gpu"})
"""Runner types the demo runs in ``mode: ephemeral``: the controller registers each new
machine's runner just in time (a JIT config in moto's SSM), the machine takes one job, and
the controller terminates it at once; machines come and go. The others are persistent."""
CYCLE = 60.0
"""Seconds of one round of the script (burst, then calm); it repeats in longer runs."""
BURST = 12.0
"""Seconds at the start of each cycle during which jobs arrive."""
BOOT_DELAY = 3.0
JOB_SECONDS = 8.0
IDLE_TIMEOUT = "6s"


def burst_then_calm(t: float) -> float:
    """The workload's rate multiplier: jobs arrive during :data:`BURST`, then none."""
    return 1.0 if t % CYCLE < BURST else 0.0


class WebhookSink:
    """A local webhook receiver: keeps every alert notification it was sent.

    ``received``: ``"STATE: title | Cause: ..."`` lines (the Cause line when the alert has
    one); ``notices``: the same, timed by ``clock``.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.received: list[str] = []
        self.notices: list[ui.Notice] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    notice = ui.notice_from_payload(clock(), json.loads(body))
                except ValueError:
                    sink.received.append("(unreadable notification)")
                else:
                    sink.notices.append(notice)
                    sink.received.append(notice.line)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                log.debug("webhook sink: connection from %s ended early", client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def demo_config(  # noqa: PLR0917 - the demo world's addresses
    github_url: str,
    token: str,
    aws_url: str,
    sink_url: str,
    tick: float,
    webhook_secret: str | None = None,
) -> Config:
    """The controller's config for the demo world, built like any user's config.

    ``webhook_secret``: the fake GitHub signs ``workflow_job`` webhooks with it and the
    controller listens on a free port; the reconcile poll runs every tick, webhook-woken
    ticks in between answer from the index."""
    runner_types = {
        name: {
            "labels": list(labels),
            "pools": [pool for pool, _ in pools],
            "min_idle": 1,
            "max": sum(size for _, size in pools),
            "priority": 10 if "gpu" in name else 5,
            "idle_timeout": IDLE_TIMEOUT,
            "boot_timeout": "30s",
            "mode": "ephemeral" if name in EPHEMERAL_TYPES else "persistent",
        }
        for name, labels, pools in WORLD
    }
    rule = {
        "team": "demo-dev-infra",
        "priority": "P2",
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
                        "max_queue_size": 4,
                        "max_queue_time": "30s",
                    },
                ],
                "receivers": {"sink": {"type": "webhook", "url": sink_url, "timeout": "2s"}},
                "builtin": {"team": "demo-dev-infra", "receivers": ["sink"]},
            },
            **(
                {}
                if webhook_secret is None
                else {
                    "webhook": {
                        "listen": "127.0.0.1:0",
                        "secret": webhook_secret,
                        "reconcile_interval": f"{tick}s",
                    }
                }
            ),
        },
        env={},
    )


@contextmanager
def demo_world(
    tick: float,
    clock: Callable[[], float] = time.monotonic,
    say: Callable[[str], None] = lambda line: None,
) -> Iterator[tuple[Config, FakeGitHub, Any, Any, WebhookSink]]:
    """Start every fake; yield (config, github, (workload, autoscaling), fleet, sink).
    ``say`` hears one line as each piece starts (the demo prints them: the start takes
    seconds, most of them moto's)."""
    from autoscaler.sim.fleet import Fleet, PoolSpec, aws_clients, create_pools, start_moto_server  # noqa: PLC0415
    from autoscaler.sim.workload import Workload  # noqa: PLC0415

    with ExitStack() as stack:
        say("starting the fake GitHub ...")
        github = FakeGitHub(owner="demo-org")
        # The demo ticks every second, not every 30 s: a real token's hourly budget would
        # (rightly) stretch its polls. Its GitHub has no rate limit, as GHES by default.
        github.RATE_LIMIT = 1_000_000_000
        github.start()
        stack.callback(github.stop)
        say(f"  fake GitHub on {github.url}")
        say("starting moto, the fake AWS ...")
        moto, aws_url = start_moto_server()
        stack.callback(moto.stop)
        say(f"  moto on {aws_url}")
        sink = WebhookSink(clock)
        stack.callback(sink.stop)
        autoscaling, ec2 = aws_clients(aws_url)
        say("creating the Auto Scaling groups and the fleet ...")
        specs = [
            PoolSpec(pool, name, labels, max_size=size, ephemeral=name in EPHEMERAL_TYPES)
            for name, labels, pools in WORLD
            for pool, size in pools
        ]
        create_pools(autoscaling, ec2, specs)
        fleet = Fleet(
            github,
            autoscaling,
            specs,
            boot_delay=BOOT_DELAY,
            job_duration=JOB_SECONDS,
            ssm=_session().client("ssm", endpoint_url=aws_url),
        )
        workload = Workload(
            github,
            [(name, labels) for name, labels, _ in WORLD],
            seed=7,
            rate_scale=30.0,
            unmatched_per_minute=10.0,
            shape=burst_then_calm,
            # Enough GPU demand after the outage that the spot pool is asked for more.
            type_scale={"linux.g5.4xlarge.nvidia.gpu": 2.0},
        )
        secret = secrets.token_hex(16)
        config = demo_config(github.url, github.token, aws_url, sink.url, tick, secret)
        yield config, github, (workload, autoscaling), fleet, sink


def _session() -> Any:
    """A boto3 session with moto's dummy credentials (the fleet's instances read SSM)."""
    import boto3  # noqa: PLC0415

    return boto3.session.Session(
        aws_access_key_id="demo",
        aws_secret_access_key="demo",  # noqa: S106 - moto accepts any credentials
        region_name="us-east-1",
    )
