"""Benchmark: what the webhook job index in the DynamoDB state table costs, per delivery and
per tick.

The same world as :mod:`bench.state_requests` (two controllers wired as ``run`` wires them,
moto's server one request at a time, a 30 s poll on a virtual clock, bursts of jobs that a
fleet emulator runs), with a ``webhook`` section: each controller serves its listener, the
fake GitHub delivers every ``workflow_job`` event, signed, to the leader's listener for one
burst and to the follower's for the next (as a load balancer would). Deliveries finish
before each tick, so a tick's requests are its own (``ci_autoscaler_aws_calls_total``
around it) and the rest are the deliveries'.

Printed: DynamoDB requests per delivery (by outcome mix), per tick for the leader and the
follower (busy and quiet), the index's partition size, and per hour at 30 s with the
leader's wake-up watch (one GetItem a second, counted on paper: the watch thread is
``run``'s). Aim: a tick reads the index in a bounded number of requests (at most
:data:`TICK_AIM` at the p95), whatever the number of deliveries.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

from autoscaler.app.served import WebhookServer
from autoscaler.app.wiring import build_runtime
from autoscaler.config import WebhookConfig
from autoscaler.scale.aws.asg import AwsAsgPool
from autoscaler.scale.aws.ssm import SsmParameters
from autoscaler.secrets import Secret
from autoscaler.sim.fleet import aws_clients, ssm_client
from autoscaler.telemetry import Metrics
from bench import aims
from bench.state_requests import (
    INTERVAL,
    LABELS,
    TICKS_PER_HOUR,
    WRITES,
    Controller,
    Meter,
    _mean,
    _p95,
    config,
    cpu_fleet,
    dynamodb_calls,
    session,
    world,
)

SECRET = "bench-webhook-secret"
REPOS = 10
BUSY_TICKS, QUIET_TICKS = 40, 10
#: Requests a tick may make for the index: one Query per shard (one page here) on top of
#: the state_requests tick (2 Queries quiet, up to ~7 busy).
TICK_AIM = 9
WATCH_PER_HOUR = 3600


def measure(seed: int = 13) -> tuple[dict[str, Controller], Counter[str], int, int]:
    """Per-tick requests of both controllers; the deliveries' requests, their count, and
    the job partition's size at the end."""
    rng = random.Random(seed)
    clock = {"now": datetime.now(UTC).replace(microsecond=0)}
    with world(clock) as (moto, github, receiver):
        for r in range(REPOS):
            github.add_repo(f"repo-{r}")
        controllers: dict[str, Controller] = {}
        servers: dict[str, WebhookServer] = {}

        def wall() -> float:
            return clock["now"].timestamp()

        hook = WebhookConfig(secret=Secret(SECRET), listen="127.0.0.1:0")
        try:
            for name in ("leader", "follower"):
                metrics, s, meter = Metrics(), session(), Meter()
                meter.attach(s)
                cfg = config(github, moto, receiver, name).model_copy(update={"webhook": hook})
                pool = AwsAsgPool(cfg.aws, metrics, session=session())
                runtime = build_runtime(
                    cfg,
                    metrics,
                    pool=pool,
                    parameters=SsmParameters(cfg.aws, metrics, session=session()),
                    session=s,
                    wall_clock=wall,
                    webhooks=True,
                )
                assert runtime.keeper is not None and runtime.webhooks is not None
                runtime.keeper.step()
                controllers[name] = Controller(name, runtime, metrics, meter)
                servers[name] = WebhookServer(
                    runtime.webhooks.receiver, metrics, "127.0.0.1", 0, workers=1
                )
                servers[name].start()
            urls = [f"http://127.0.0.1:{servers[n].port}/github/webhook" for n in servers]
            sender = github.send_webhooks(urls[0], SECRET.encode())
            autoscaling, _ = aws_clients(moto)
            fleet = cpu_fleet(github, autoscaling, ssm_client(moto))
            outside: Counter[str] = Counter()
            bursts = 0
            phases = [("warm-up", 3), ("busy", BUSY_TICKS), ("drain", 20), ("quiet", QUIET_TICKS)]
            for phase, ticks in phases:
                for k in range(ticks):
                    before = {n: dynamodb_calls(c.metrics) for n, c in controllers.items()}
                    if phase in ("warm-up", "busy") and k % 8 < 3:
                        sender.url = urls[bursts % 2]  # the load balancer's pick
                        bursts += 1
                        for _ in range(rng.randint(2, 6)):
                            repo = f"repo-{rng.randrange(REPOS)}"
                            github.queue_job(repo, LABELS, created_at=clock["now"])
                    fleet.tick(clock["now"])
                    assert sender.wait_idle(30)
                    for n, c in controllers.items():
                        outside += dynamodb_calls(c.metrics) - before[n]
                        c.tick(clock["now"], phase)
                    clock["now"] += timedelta(seconds=INTERVAL)
            hooks = controllers["leader"].runtime.webhooks
            assert hooks is not None and hooks.source.store is not None
            size = len(hooks.source.store.load_job_index(wall()))
            sent = len(sender.sent)
            sender.close()
        finally:
            for server in servers.values():
                server.stop()
            for c in controllers.values():
                c.runtime.close()
    return controllers, outside, sent, size


def run() -> bool:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    print("\n== Webhook job index in DynamoDB: requests per delivery and per tick (poll 30 s) ==")
    controllers, outside, sent, size = measure()
    # the keeper's own steps are not in the deliveries' share
    outside_ops = ", ".join(f"{op} {n}" for op, n in sorted(outside.items()))
    per_delivery = sum(outside.values()) / max(1, sent)
    print(
        f"{sent} deliveries (half to each controller): {sum(outside.values())} requests "
        f"({outside_ops}), {per_delivery:.2f} per delivery; job partition at the end: "
        f"{size} rows"
    )
    print(f"{'role':<8} {'phase':<6} {'req/tick':>8} {'p95':>5} {'writes':>7}  by operation")
    ok = True
    for name, c in controllers.items():
        for phase in ("busy", "quiet"):
            ticks = c.per_tick[phase]
            total = sum(ticks, Counter[str]())
            by_op = ", ".join(f"{op} {n / len(ticks):.2f}" for op, n in sorted(total.items()))
            writes = sum(t[op] for t in ticks for op in WRITES)
            print(
                f"{name:<8} {phase:<6} {_mean(ticks):>8.2f} {_p95(ticks):>5.0f} {writes:>7}  "
                f"{by_op}"
            )
            ok &= _p95(ticks) <= TICK_AIM
        busy = _mean(c.per_tick["busy"]) * TICKS_PER_HOUR
        watch = WATCH_PER_HOUR if name == "leader" else 0
        print(f"{name:<8} busy   ticks {busy:.0f}/h + wake-up watch {watch}/h (on paper)")
    return aims.count(f"p95 requests per tick <= {TICK_AIM}", ok)


if __name__ == "__main__":
    raise SystemExit(0 if run() else 1)
