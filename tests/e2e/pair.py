"""Several real controllers (`ci-autoscaler run` subprocesses) on one DynamoDB state table and
the same pools: moto's server (the table and the Auto Scaling groups), the fake GitHub with
a fleet emulator turning instances into runners and running jobs, a workload that queues
bursts (so pools grow and shrink and an alert fires and resolves again and again), and a
receiver that records every notification with the controller it came from.

Each controller sends to its own path of the receiver (``/hook/<name>``) under the same
receiver name, so a notification is attributed to its sender. Each controller logs to its
own file; the fence logs every leader-only action with its epoch (``epoch N: action``) and
the keeper every lease it takes, so who acted when is read back from the logs.

Used by tests/e2e/test_two_controllers.py and by ``make bench`` (bench/failover.py).
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

from autoscaler.fakes.github import FakeGitHub
from autoscaler.sim.fleet import (
    Fleet,
    PoolSpec,
    aws_clients,
    create_pools,
    moto_session,
    ssm_client,
)
from tests.conftest import free_port

CPU = ["self-hosted", "linux.4xlarge"]
TABLE = "ci-autoscaler-state"
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
RULE = "CPU jobs queueing"

_STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
ACQUIRED = re.compile(_STAMP + r" INFO .*: leader: took the lease on .* \(epoch (\d+);")
FOLLOWING = re.compile(r" INFO .*: following: .* \(epoch (\d+)\)$")
ACTION = re.compile(_STAMP + r" INFO autoscaler\.state\.fence: epoch (\d+): (\S+) ?(.*)$")


def log_time(stamp: str) -> float:
    """A log line's ``asctime`` (local time, milliseconds) as unix time."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@dataclass(frozen=True)
class Received:
    at: float
    sender: str
    body: dict[str, Any]

    @property
    def event_id(self) -> str:
        return str(self.body["event_id"])


class Receiver:
    """A webhook on port 0 recording (time, sender, body) for every POST /hook/<sender>."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    received.append(Received(time.time(), self.path.rsplit("/", 1)[-1], body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Controller:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    started: float
    hook_port: int = 0
    """The webhook listener's port (0: the pair runs without webhooks)."""

    @property
    def hook_url(self) -> str:
        return f"http://127.0.0.1:{self.hook_port}/github/webhook"

    def lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8", errors="replace").splitlines()

    def acquisitions(self) -> list[tuple[float, int]]:
        """(when, epoch) of every lease this controller took."""
        return [(log_time(m[1]), int(m[2])) for line in self.lines() if (m := ACQUIRED.match(line))]

    def actions(self) -> list[tuple[float, int, str, str]]:
        """(when, epoch, action, detail) of every leader-only action it let through."""
        return [
            (log_time(m[1]), int(m[2]), m[3], m[4])
            for line in self.lines()
            if (m := ACTION.match(line))
        ]

    def metric(self, name: str) -> float | None:
        try:
            text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=2).text
        except httpx.HTTPError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


@dataclass
class Pair:
    """The environment; controllers are started by name and may be killed and restarted."""

    tmp: Path
    moto: str
    github: FakeGitHub
    receiver: Receiver
    lease_duration: float = 2.0
    poll_interval: float = 1.0
    webhook_secret: str | None = None
    """Set: every controller listens for signed webhooks (``webhook`` section)."""
    boot_timeout: str = "30s"
    job_retry: bool = False
    """Set: every controller re-runs runs lost to infrastructure (``job_retry``)."""
    controllers: dict[str, Controller] = field(default_factory=dict)
    stopped: list[Controller] = field(default_factory=list)
    fleet: Fleet | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _queueing: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def config(self, name: str, port: int, hook_port: int = 0) -> Path:
        doc: dict[str, Any] = {
            "poll_interval": f"{self.poll_interval:g}s",
            "listen": f"127.0.0.1:{port}",
            "log_level": "info",
            "github": {"api_url": self.github.url, "owner": "ha-org", "token": "ha-token"},
            "runner_types": {
                "linux.4xlarge": {
                    "labels": CPU,
                    "pools": ["ci-cpu"],
                    "idle_timeout": "2s",
                    "boot_timeout": self.boot_timeout,
                }
            },
            "aws": {
                "region": "us-east-1",
                "endpoint_url": self.moto,
                "retry": {"max_attempts": 2, "deadline": "2s"},
            },
            "state": {
                "backend": "dynamodb",
                "table": TABLE,
                "lease_duration": f"{self.lease_duration:g}s",
            },
            "alerts": {
                "rules": [
                    {
                        "name": RULE,
                        "team": "dev-infra",
                        "priority": "P2",
                        "description": "CPU jobs wait",
                        "max_queue_size": 1,
                        "receivers": ["hook"],
                    }
                ],
                "receivers": {"hook": {"type": "webhook", "url": f"{self.receiver.url}/{name}"}},
                "builtin": {
                    "unmatched_jobs": False,
                    "github_unreachable_after": "0s",
                    "github_budget": False,
                },
            },
        }
        if self.job_retry:
            doc["job_retry"] = {"enabled": True}
        if self.webhook_secret is not None:
            doc["webhook"] = {
                "listen": f"127.0.0.1:{hook_port}",
                "secret": "${PAIR_WEBHOOK_SECRET}",
                "reconcile_interval": "5m",
            }
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        return path

    def start(self, name: str) -> Controller:
        port = free_port()
        hook_port = free_port() if self.webhook_secret is not None else 0
        log = self.tmp / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "autoscaler",
                    "run",
                    "--config",
                    str(self.config(name, port, hook_port)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=out,
                env={**os.environ, **AWS_ENV, "PAIR_WEBHOOK_SECRET": self.webhook_secret or ""},
            )
        c = Controller(name, proc, log, port, time.time(), hook_port)
        self.controllers[name] = c
        return c

    def kill(self, name: str, sig: int = signal.SIGKILL) -> float:
        c = self.controllers[name]
        at = time.time()
        c.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            c.proc.wait(20)
            self.stopped.append(self.controllers.pop(name))
        return at

    @functools.cached_property
    def dynamodb(self) -> Any:
        """One client for the test's reads of the table (they poll every 50 ms: a client
        per read cost the test process a core on a two-core machine)."""
        return moto_session().client("dynamodb", endpoint_url=self.moto)

    def lease(self) -> dict[str, Any] | None:
        item = self.dynamodb.get_item(
            TableName=TABLE, Key={"pk": {"S": "lease"}, "sk": {"S": "lease"}}, ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        return {k: next(iter(v.values())) for k, v in item.items()}

    def items(self, pk: str) -> list[dict[str, Any]]:
        out = self.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
            ConsistentRead=True,
        )["Items"]
        return [{k: next(iter(v.values())) for k, v in i.items()} for i in out]

    def following(self, c: Controller, epoch: int) -> bool:
        """``c`` has seen the lease of ``epoch`` or a later one (a warm follower: it can take
        over). Or later: a leader whose renewal timed out but landed takes its own lease
        again under the next epoch, and a follower started since sees only that one."""
        return any(int(m[1]) >= epoch for line in c.lines() if (m := FOLLOWING.search(line)))

    def serving(self, c: Controller) -> bool:
        """``c`` has started: imported, wired, its /metrics listener up."""
        return any("serving /metrics" in line for line in c.lines())

    def leader(self) -> Controller | None:
        """The running controller the lease item names (None: nobody, or a dead one)."""
        lease = self.lease()
        if lease is None or not lease["owner"]:
            return None
        pid = int(str(lease["owner"]).split(":")[1])
        return next((c for c in self.controllers.values() if c.proc.pid == pid), None)

    def all_controllers(self) -> list[Controller]:
        return [*self.stopped, *self.controllers.values()]

    # --- the world moving on

    def drive(self, *, burst: int = 4, every: float = 4.0, job_seconds: float = 1.0) -> None:
        """Run the fleet emulator (every 0.2 s) and queue ``burst`` CPU jobs every ``every``
        seconds, in background threads (:meth:`quiesce` stops the queueing). Between bursts
        the idle runners are scaled in (``idle_timeout: 2s``), so each burst queues jobs
        (the alert fires), scales up, runs and drains (it resolves): a scale-up, scale-ins
        and two notifications per burst."""
        autoscaling, _ = aws_clients(self.moto)
        fleet = self.fleet = Fleet(
            self.github,
            autoscaling,
            [PoolSpec("ci-cpu", "linux.4xlarge", tuple(CPU), max_size=6)],
            boot_delay=0.5,
            job_duration=job_seconds,
            ssm=ssm_client(self.moto),
        )

        def run_fleet() -> None:
            while not self._stop.wait(0.2):
                try:
                    fleet.tick(datetime.now(UTC))
                except Exception:  # moto busy for a moment: the next tick catches up
                    continue

        def queue() -> None:
            while not self._queueing.wait(every):
                self.burst(burst)

        for target in (run_fleet, queue):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)

    def burst(self, count: int) -> None:
        """Queue ``count`` CPU jobs now."""
        now = datetime.now(UTC)
        for _ in range(count):
            self.github.queue_job("app", CPU, created_at=now - timedelta(seconds=1))

    def quiesce(self) -> None:
        """Stop queueing jobs; the fleet runs what is queued, the queue drains."""
        self._queueing.set()

    def close(self) -> None:
        self._stop.set()
        self._queueing.set()
        for thread in self._threads:
            thread.join(5)
        for c in list(self.controllers.values()):
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGCONT)
                c.proc.send_signal(signal.SIGTERM)
                try:
                    c.proc.wait(15)
                except subprocess.TimeoutExpired:
                    c.proc.kill()
                    c.proc.wait()
            self.stopped.append(c)
        self.controllers.clear()


def create_table(moto: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """``ci-autoscaler state create-table`` against moto (a config naming the table)."""
    path = tmp / "create-table.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "github": {"owner": "ha-org", "token": "x"},
                "runner_types": {"linux.4xlarge": {"labels": CPU}},
                "aws": {"region": "us-east-1", "endpoint_url": moto},
                "state": {"backend": "dynamodb", "table": TABLE},
            }
        ),
        encoding="utf-8",
    )
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", "state", "create-table", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **AWS_ENV},
        check=False,
    )


@contextmanager
def pair(
    tmp: Path,
    moto: str,
    *,
    table: bool = True,
    lease_duration: float = 2.0,
    poll_interval: float = 1.0,
    webhook_secret: str | None = None,
    boot_timeout: str = "30s",
    job_retry: bool = False,
) -> Iterator[Pair]:
    """The environment on a fresh moto: the CPU pool, the table (``table``), the fake
    GitHub and the receiver; closed (controllers stopped) at the end."""
    autoscaling, ec2 = aws_clients(moto)
    create_pools(autoscaling, ec2, [PoolSpec("ci-cpu", "linux.4xlarge", tuple(CPU), max_size=6)])
    if table:
        done = create_table(moto, tmp)
        assert done.returncode == 0, done.stderr
    github = FakeGitHub(owner="ha-org", token="ha-token")
    # Two or three controllers polling every 2 s spend far more than a 5,000/h token: the
    # GitHub budget then re-listed busy repositories only every 8-22 s, so a burst
    # was seen late and "two alerts fired and resolved" timed out at 90 s even on a quiet
    # machine. These tests are about the lease, not the budget.
    github.RATE_LIMIT = 1_000_000_000
    github.start()
    github.add_repo("app")
    receiver = Receiver()
    p = Pair(
        tmp,
        moto,
        github,
        receiver,
        lease_duration,
        poll_interval,
        webhook_secret=webhook_secret,
        boot_timeout=boot_timeout,
        job_retry=job_retry,
    )
    try:
        yield p
    finally:
        p.close()
        receiver.stop()
        if github.webhooks is not None:
            github.webhooks.close()
        github.stop()


def wait_until(check: Callable[[], object], seconds: float, what: str, step: float = 0.05) -> Any:
    """``check()``'s first truthy value within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        time.sleep(step)
