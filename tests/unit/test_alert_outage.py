"""An outage is one incident: one FIRING, one RESOLVED, however often it is retried.

Regression. Both GPU pools were out of capacity for 5.6 hours. The capacity back-off
retried each pool when its back-off (5 minutes, doubling to 30) ended; on that tick a pool
was "being retried", not "in back-off", so "every pool of the type is out of capacity" no
longer held and the page resolved; the retry failed a tick later and it fired again: 7
FIRING and 6 RESOLVED for one outage. A pool that failed stays failing until it delivers
(its back-off memory is reset only then): retries that fail are not a recovery.

The run is the real controller tick (the scaler over the fake pool, which fails as AWS
does: a scale-up accepted, a Failed scaling activity, nothing launched; the alert engine
and its delivery to a webhook receiver) on a virtual clock, one tick per poll interval.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from autoscaler.alerting.builtin_rules import PROVISIONING_RULE
from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine
from autoscaler.config import AlertsConfig, BuiltinAlertsConfig, ReceiverConfig
from autoscaler.controller import Controller
from autoscaler.domain import Job, JobStatus, Observation, normalize_labels
from autoscaler.scale.scaler import Scaler
from autoscaler.secrets import SecretUrl
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import GPU, T0, FakePool, FakeSource, config, pool, rtype

OUTAGE = timedelta(hours=5.6)
TICK = timedelta(seconds=30)


@dataclass
class QueuedGpuJobs(FakeSource):
    """GitHub: two GPU jobs wait the whole time (no machine ever takes them)."""

    def observe(self, now: datetime) -> Observation:
        labels = normalize_labels(["self-hosted", GPU])
        jobs = tuple(
            Job(n, n, "app", "train", labels, JobStatus.QUEUED, T0 - timedelta(minutes=1))
            for n in (1, 2)
        )
        return Observation(now, jobs, tuple(self.runners.values()))


def test_a_double_outage_of_five_hours_pages_once_and_resolves_once() -> None:
    pages: list[dict[str, Any]] = []

    def receive(request: httpx.Request) -> httpx.Response:
        pages.append(json.loads(request.content))
        return httpx.Response(200)

    receivers = {
        "oncall": ReceiverConfig(name="oncall", type="webhook", url=SecretUrl("http://127.0.0.1:9"))
    }
    builtin = BuiltinAlertsConfig(team="dev-infra", unmatched_jobs=False, clock_skew_max=0)
    cfg = config(rtype(pools=("gpu-spot", "gpu-od"), boot_timeout=900)).model_copy(
        update={"alerts": AlertsConfig(receivers=receivers, builtin=builtin)}
    )
    metrics = Metrics(CollectorRegistry())
    deliverer = Deliverer(receivers, metrics, transport=httpx.MockTransport(receive))
    fake = FakePool({"gpu-spot": pool("gpu-spot"), "gpu-od": pool("gpu-od")})
    fake.outage.update({"gpu-spot", "gpu-od"})
    source = QueuedGpuJobs()
    scaler = Scaler(
        fake,
        source,
        cfg,
        metrics,
        sleep=lambda _: None,
        rng=random.Random(0),
        **handover_ports(source),
    )
    engine = AlertEngine(cfg.alerts, SqliteStore(None), deliverer, metrics)
    controller = Controller(cfg, source, metrics, alerts=engine, scaler=scaler)
    retries = 0
    try:
        now = T0
        while now < T0 + OUTAGE + timedelta(hours=1):
            if now >= T0 + OUTAGE:
                fake.outage.clear()  # capacity is back
            fake.now = now + timedelta(seconds=5)  # AWS starts the activity after our call
            before = sum(1 for c in fake.calls if c[0] == "set_desired_capacity")
            controller.tick(now)
            retries += sum(1 for c in fake.calls if c[0] == "set_desired_capacity") - before
            assert deliverer.flush(10.0), "delivery did not finish"
            now += TICK
    finally:
        deliverer.close()

    outage = [p for p in pages if p["rule"] == PROVISIONING_RULE]
    assert all(p["values"]["out_of_capacity"] == 1 for p in outage)
    pages_sent = [p["state"] for p in outage if not p["repeat"]]
    assert pages_sent == ["FIRING", "RESOLVED"]
    assert {p["started_at"] for p in outage} == {"2026-11-30T03:01:00Z"}  # one incident
    # ...and the built-ins' reminder of a page still firing, every four hours (not a new
    # incident: the same event, marked repeat)
    assert [p["occurred_at"] for p in outage if p["repeat"]] == ["2026-11-30T03:01:00Z"]
    assert retries > 12, "the pools were retried through the outage, as the back-off does"
    assert len(fake.pools["gpu-spot"].instances) + len(fake.pools["gpu-od"].instances) == 2
