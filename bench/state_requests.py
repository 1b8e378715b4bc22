"""Benchmark: what the DynamoDB state backend costs in requests, per tick and per hour.

Two real controllers (``build_runtime``, the wiring ``ci-autoscaler run`` uses) share one
state table on moto's server: the leader and a follower, at ``poll_interval: 30s`` and
``lease_duration: 30s`` on a virtual clock (each tick is told ``now``; the fake GitHub, the
fleet emulator and the jobs follow the same clock). Ticks run back to back, with each
lease stepped by hand between ticks, so every request in a tick is the tick's: counted from
``ci_autoscaler_aws_calls_total`` (by operation) around it. Item bytes are read from the
requests and answers themselves (boto3's documented event hooks, on the benchmark's own
session), to turn requests into DynamoDB's capacity units.

Phases, for each org size (repositories; the ETag cache written to the table grows with
it), side by side: **busy** (jobs queue in bursts, pools grow and shrink, the alert fires
and resolves), **quiet** (no jobs: nothing changes). The lease's own requests per hour are
counted separately, by stepping a leader's and a follower's :class:`Lease` through an hour
of virtual time against the same table.

Per hour at 30 s = 120 ticks x requests per tick + the lease's hour. Aims: a quiet tick
sends no write, and the pair stays under 10,000 requests an hour in the busy phase (under
about 20 US cents a month on demand; docs/simulator.md works the cost out).
"""

from __future__ import annotations

import logging
import math
import random
import statistics
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from autoscaler.alerting.engine import AlertEngine
from autoscaler.app.wiring import Runtime, build_runtime
from autoscaler.config import AwsConfig, Config, parse_config
from autoscaler.fakes.github import FakeGitHub
from autoscaler.scale.aws.asg import AwsAsgPool
from autoscaler.scale.aws.ssm import SsmParameters
from autoscaler.sim.fleet import (
    Fleet,
    PoolSpec,
    aws_clients,
    create_pools,
    moto_session,
    reset_moto_server,
    ssm_client,
    start_moto_server,
)
from autoscaler.state.dynamodb_lease import DynamoLeaseTable
from autoscaler.state.dynamodb_table import DynamoTable, create_table, item_size
from autoscaler.state.lease import Lease
from autoscaler.telemetry import Metrics
from bench import aims
from tests.e2e.pair import Receiver

TABLE = "ci-autoscaler-state"
INTERVAL = 30.0
LEASE = 30.0
TICKS_PER_HOUR = 3600 / INTERVAL
SIZES = (1, 10, 50)
BUSY_TICKS, QUIET_TICKS = 40, 10
LABELS = ("self-hosted", "linux.4xlarge")
WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")
READS = ("GetItem", "Query", "DescribeTable")
HOUR_AIM = 10_000

#: DynamoDB on-demand, us-east-1 (USD per million request units, since November 2024).
USD_PER_MILLION_WRU = 0.625
USD_PER_MILLION_RRU = 0.125


def session() -> boto3.session.Session:
    return moto_session()


@dataclass
class Units:
    """Capacity units, from the bytes of each request's items (DynamoDB's rounding)."""

    wru: float = 0.0
    rru: float = 0.0

    def add(self, other: Units) -> None:
        self.wru += other.wru
        self.rru += other.rru


@dataclass
class Meter:
    """Counts capacity units of every DynamoDB call a session's clients make."""

    units: Units = field(default_factory=Units)

    def attach(self, s: boto3.session.Session) -> None:
        s.events.register("provide-client-params.dynamodb.*", self._request)
        s.events.register("after-call.dynamodb.*", self._answer)

    def _request(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        name = model.name
        if name == "TransactWriteItems":  # two units per KB per item, condition checks too
            for action in params["TransactItems"]:
                [(_kind, body)] = action.items()
                size = item_size(body.get("Item", body.get("Key", {})))
                self.units.wru += 2 * math.ceil(max(size, 1) / 1024)
        elif name in ("PutItem", "UpdateItem", "DeleteItem"):
            size = item_size(params.get("Item", params.get("Key", {})))
            self.units.wru += math.ceil(max(size, 1) / 1024)

    def _answer(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        name = model.name
        if name == "GetItem":  # strongly consistent: one unit per 4 KB
            self.units.rru += math.ceil(max(item_size(parsed.get("Item", {})), 1) / 4096)
        elif name == "Query":  # the page's items together, rounded up to 4 KB
            size = sum(item_size(i) for i in parsed.get("Items", []))
            self.units.rru += math.ceil(max(size, 1) / 4096)


def dynamodb_calls(metrics: Metrics) -> Counter[str]:
    """Requests so far by operation (DynamoDB's only)."""
    out: Counter[str] = Counter()
    for family in metrics.registry.collect():
        if family.name != "ci_autoscaler_aws_calls":
            continue
        for sample in family.samples:
            operation = sample.labels.get("operation", "")
            if sample.name.endswith("_total") and operation in (*WRITES, *READS):
                out[operation] += int(sample.value)
    return out


def config(github: FakeGitHub, moto: str, receiver: Receiver, name: str) -> Config:
    return parse_config(
        {
            "poll_interval": f"{INTERVAL:g}s",
            "github": {"api_url": github.url, "owner": "bench-org", "token": "bench-token"},
            "runner_types": {
                "linux.4xlarge": {
                    "labels": list(LABELS),
                    "pools": ["ci-cpu"],
                    "idle_timeout": "2m",
                    # The virtual clock runs ahead of moto's (instances' launch times are
                    # real): a boot_timeout past the run's length keeps booting instances
                    # from looking like orphans that never registered.
                    "boot_timeout": "3h",
                }
            },
            "aws": {"region": "us-east-1", "endpoint_url": moto},
            # The ticks run back to back on a virtual clock but the lease on the real one:
            # an hour's lease keeps the roles fixed however slow the machine (a follower
            # took over mid-run at load average 16). Its requests are counted apart.
            "state": {"backend": "dynamodb", "table": TABLE, "lease_duration": "1h"},
            "alerts": {
                "rules": [
                    {
                        "name": "CPU jobs queueing",
                        "team": "dev-infra",
                        "priority": "P2",
                        "description": "CPU jobs wait",
                        "max_queue_size": 5,
                        "receivers": ["hook"],
                    }
                ],
                "receivers": {"hook": {"type": "webhook", "url": f"{receiver.url}/{name}"}},
                "builtin": {"unmatched_jobs": False, "github_budget": False},
            },
        },
        env={},
    )


@dataclass
class Controller:
    name: str
    runtime: Runtime
    metrics: Metrics
    meter: Meter
    per_tick: dict[str, list[Counter[str]]] = field(default_factory=dict)
    units: dict[str, Units] = field(default_factory=dict)

    def tick(self, now: datetime, phase: str) -> None:
        """One tick, its requests counted: the lease stepped first (counted apart, in
        :func:`lease_hour`), the notifications' delivery waited for (counted in)."""
        keeper, alerts = self.runtime.keeper, self.runtime.controller.alerts
        assert keeper is not None and isinstance(alerts, AlertEngine)
        assert alerts.deliverer is not None
        keeper.step()
        calls, wru, rru = dynamodb_calls(self.metrics), self.meter.units.wru, self.meter.units.rru
        self.runtime.controller.tick(now)
        alerts.deliverer.flush()
        self.per_tick.setdefault(phase, []).append(dynamodb_calls(self.metrics) - calls)
        spent = self.units.setdefault(phase, Units())
        spent.add(Units(self.meter.units.wru - wru, self.meter.units.rru - rru))


def cpu_fleet(github: FakeGitHub, autoscaling: Any, ssm: Any) -> Fleet:
    """The emulated fleet of both request benchmarks: one CPU pool of 40, runners that
    boot in a minute (with the registration token the controller left in SSM) and jobs of
    1 to 5 minutes."""
    return Fleet(
        github,
        autoscaling,
        [PoolSpec("ci-cpu", "linux.4xlarge", LABELS, 40)],
        boot_delay=60.0,
        job_duration=lambda job: 60.0 + (job * 37) % 240,
        ssm=ssm,
    )


@contextmanager
def world(clock: dict[str, datetime]) -> Iterator[tuple[str, FakeGitHub, Receiver]]:
    """moto's server (one request at a time, as DynamoDB's conditional writes are atomic)
    with the pool and the table, the fake GitHub on ``clock``, a receiver."""
    server, moto = start_moto_server(atomic=True)
    reset_moto_server(moto)
    github = FakeGitHub(owner="bench-org", token="bench-token", clock=lambda: clock["now"])
    receiver = Receiver()
    try:
        autoscaling, ec2 = aws_clients(moto)
        create_pools(autoscaling, ec2, [PoolSpec("ci-cpu", "linux.4xlarge", LABELS, 40)])
        create_table(DynamoTable(AwsConfig(endpoint_url=moto), TABLE, Metrics(), session=session()))
        github.start()
        yield moto, github, receiver
    finally:
        receiver.stop()
        github.stop()
        reset_moto_server(moto)
        server.stop()


def measure(repos: int, seed: int = 13) -> dict[str, Controller]:
    """Busy then quiet ticks of a leader and a follower on an org of ``repos``."""
    rng = random.Random(seed)
    clock = {"now": datetime.now(UTC).replace(microsecond=0)}
    with world(clock) as (moto, github, receiver):
        for r in range(repos):
            github.add_repo(f"repo-{r}")
        controllers: dict[str, Controller] = {}

        def wall() -> float:  # the source's cache ages and clock skew on the virtual clock
            return clock["now"].timestamp()

        try:
            for name in ("leader", "follower"):  # the leader's first step creates the lease
                metrics, s, meter = Metrics(), session(), Meter()
                meter.attach(s)
                cfg = config(github, moto, receiver, name)
                pool = AwsAsgPool(cfg.aws, metrics, session=session())
                ssm = SsmParameters(cfg.aws, metrics, session=session())
                runtime = build_runtime(
                    cfg, metrics, pool=pool, parameters=ssm, session=s, wall_clock=wall
                )
                assert runtime.keeper is not None
                runtime.keeper.step()
                controllers[name] = Controller(name, runtime, metrics, meter)
            assert controllers["leader"].runtime.controller.acting()
            assert not controllers["follower"].runtime.controller.acting()
            autoscaling, _ = aws_clients(moto)
            fleet = cpu_fleet(github, autoscaling, ssm_client(moto))
            phases = [("warm-up", 3), ("busy", BUSY_TICKS), ("drain", 20), ("quiet", QUIET_TICKS)]
            for phase, ticks in phases:
                for k in range(ticks):
                    if phase in ("warm-up", "busy") and k % 8 < 3:  # a burst in 3 ticks of 8
                        for _ in range(rng.randint(2, 6)):
                            repo = f"repo-{rng.randrange(repos)}"
                            github.queue_job(repo, LABELS, created_at=clock["now"])
                    fleet.tick(clock["now"])
                    for c in controllers.values():
                        c.tick(clock["now"], phase)
                    clock["now"] += timedelta(seconds=INTERVAL)
        finally:
            for c in controllers.values():
                c.runtime.close()
    return controllers


def lease_hour() -> dict[str, tuple[Counter[str], Units]]:
    """A leader's and a follower's lease requests over one virtual hour at LEASE."""
    with world({"now": datetime.now(UTC)}) as (moto, _github, _receiver):
        clock = {"t": 0.0}
        out: dict[str, tuple[Metrics, Meter]] = {}
        leases: dict[str, Lease] = {}
        for name in ("leader", "follower"):
            metrics, s, meter = Metrics(), session(), Meter()
            meter.attach(s)
            table = DynamoTable(AwsConfig(endpoint_url=moto), TABLE, metrics, session=s)
            leases[name] = Lease(
                DynamoLeaseTable(table),
                name,
                LEASE,
                monotonic=lambda: clock["t"],
                wall_clock=lambda: 1.7e9 + clock["t"],
                new_version=lambda: f"{random.getrandbits(64):x}",
                table_name=TABLE,
            )
            out[name] = (metrics, meter)
            leases[name].step()  # the leader first: it creates the lease
        due = {name: 0.0 for name in leases}
        while True:
            name = min(due, key=lambda n: due[n])
            if due[name] >= 3600:
                break
            clock["t"] = due[name]
            leases[name].step()
            due[name] = clock["t"] + max(0.01, leases[name].next_step_in())
        assert leases["leader"].acting() and not leases["follower"].acting()
        return {n: (dynamodb_calls(m), meter.units) for n, (m, meter) in out.items()}


def _mean(ticks: list[Counter[str]]) -> float:
    return statistics.fmean(sum(t.values()) for t in ticks) if ticks else 0.0


def _p95(ticks: list[Counter[str]]) -> float:
    totals = sorted(sum(t.values()) for t in ticks)
    return float(totals[min(len(totals) - 1, math.ceil(0.95 * len(totals)) - 1)])


def _writes(ticks: list[Counter[str]]) -> int:
    return sum(t[op] for t in ticks for op in WRITES)


def run() -> bool:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's request log
    print("\n== DynamoDB state: requests per tick and per hour (poll 30 s, lease 30 s) ==")
    lease = lease_hour()
    for name, (calls, units) in lease.items():
        ops = ", ".join(f"{op} {n}" for op, n in sorted(calls.items()))
        print(
            f"lease, one hour, {name}: {sum(calls.values())} requests ({ops}),"
            f" {units.wru:.0f} WRU, {units.rru:.0f} RRU"
        )
    print(
        f"{'repos':>5} {'role':<8} {'phase':<6} {'req/tick':>8} {'p95':>5} {'writes':>7}"
        f" {'WRU/tick':>8} {'RRU/tick':>8} {'req/hour':>9} {'USD/month':>9}  by operation"
    )
    ok = True
    for repos in SIZES:
        controllers = measure(repos)
        pair_hour = 0.0
        for name, c in controllers.items():
            lease_calls, lease_units = lease[name]
            for phase in ("busy", "quiet"):
                ticks = c.per_tick[phase]
                units = c.units[phase]
                per_hour = TICKS_PER_HOUR * _mean(ticks) + sum(lease_calls.values())
                wru = TICKS_PER_HOUR * units.wru / len(ticks) + lease_units.wru
                rru = TICKS_PER_HOUR * units.rru / len(ticks) + lease_units.rru
                usd = 730 * (wru * USD_PER_MILLION_WRU + rru * USD_PER_MILLION_RRU) / 1e6
                total = sum(ticks, Counter[str]())
                by_op = ", ".join(f"{op} {n / len(ticks):.2f}" for op, n in sorted(total.items()))
                print(
                    f"{repos:>5} {name:<8} {phase:<6} {_mean(ticks):>8.2f} {_p95(ticks):>5.0f}"
                    f" {_writes(ticks):>7} {units.wru / len(ticks):>8.2f}"
                    f" {units.rru / len(ticks):>8.2f} {per_hour:>9.0f} {usd:>9.3f}  {by_op}"
                )
                if phase == "busy":
                    pair_hour += per_hour
                if phase == "quiet":
                    writes = _writes(ticks)
                    ok &= aims.count(
                        f"{repos} repos: {name}'s quiet ticks wrote {writes}", not writes
                    )
            if name == "follower":
                writes = _writes(c.per_tick["busy"])
                ok &= aims.count(f"{repos} repos: the follower wrote {writes}", not writes)
        print(f"{repos:>5} both     busy   requests/hour {pair_hour:.0f} (aim < {HOUR_AIM})")
        ok &= aims.count(
            f"{repos} repos: the pair under {HOUR_AIM} requests an hour", pair_hour < HOUR_AIM
        )
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if run() else 1)
