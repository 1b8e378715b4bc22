"""The benchmark's two processes, driven over stdin/stdout with one JSON object a line.

``python -m bench.proc fake PARAMS``: a FakeGitHub (its own process, so the controller's
RSS and CPU are its own) holding a synthetic org on a virtual clock. Commands:
``{"op": "churn", "seconds": s}`` (the clock moves on, jobs start, complete and queue),
``{"op": "stats"}`` (requests answered, 304s, the fake's CPU seconds, rate limit used),
``{"op": "quit"}``.

``python -m bench.proc controller PARAMS``: the real controller (GitHub source, queue
math, alert engine, scaling policy against an in-memory pool, the ETag cache in a SQLite
state store) ticking at the times it is told: ``{"op": "tick", "t": unix_time}`` answers
the tick's wall time, the process's CPU time, requests by status and peak RSS. Ticks run
with ``dry_run``: everything is decided, nothing acted on (the pool is not real).
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import httpx

from autoscaler.alerting.engine import AlertEngine
from autoscaler.config import parse_config
from autoscaler.controller import Controller
from autoscaler.domain import Instance, InstanceLifecycle, JobStatus, PoolState
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.source import GitHubSource
from autoscaler.scale.scaler import Scaler
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics
from bench.org import T0, Org, Size, type_names
from bench.skewed import Shape, SkewedOrg


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _serve(handle: Any) -> None:
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "quit":
            break
        print(json.dumps(handle(command)), flush=True)


def run_fake(params: dict[str, Any]) -> None:
    clock = {"now": T0}
    fake = FakeGitHub(clock=lambda: clock["now"], latency=params["latency"])
    fake.RATE_LIMIT = params["rate_limit"]
    org: Org | SkewedOrg
    if "shape" in params:
        org = SkewedOrg(fake, Shape(**params["shape"]))
        clock["now"] = org.now
    else:
        org = Org(fake, Size(**params["size"]))
    org.populate()
    clock["now"] = org.now
    fake.start()
    print(json.dumps({"url": fake.url, "owner": fake.owner}), flush=True)

    def handle(command: dict[str, Any]) -> dict[str, Any]:
        if command["op"] == "churn":
            with fake.lock:
                moved = org.churn(command["seconds"])
                clock["now"] = org.now
            return moved
        if command["op"] == "queued" and isinstance(org, SkewedOrg):
            return {"ids": sorted(org.queued_ids()), **org.census()}
        with fake.lock:
            requests = list(fake.requests)
            used = fake._rate_used
        return {
            "requests": len(requests),
            "not_modified": sum(1 for r in requests if r.status == 304),
            "cpu": _cpu(),
            "rate_used": used,
        }

    try:
        _serve(handle)
    finally:
        fake.stop()


def _latency_sum(metrics: Metrics) -> float:
    """Seconds spent in GitHub requests so far (every thread), from the controller's metric."""
    total = 0.0
    for family in metrics.registry.collect():
        if family.name == "ci_autoscaler_github_request_duration_seconds":
            total += sum(s.value for s in family.samples if s.name.endswith("_sum"))
    return total


def _listings(metrics: Metrics) -> dict[str, float]:
    """Listings the poll asked for so far, by ``listing/reason``, from its own metric."""
    out: dict[str, float] = {}
    for family in metrics.registry.collect():
        if family.name == "ci_autoscaler_github_listings":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    key = f"{sample.labels['listing']}/{sample.labels['reason']}"
                    out[key] = out.get(key, 0.0) + sample.value
    return out


class CutPolls(logging.Handler):
    """Counts the poll's "cut short" warnings: the one sign of a poll that ran out of its
    deadline that both code paths give (the baseline has no metric for it)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "cut short" in str(record.msg):
            self.count += 1


def _statuses(metrics: Metrics) -> dict[str, float]:
    """GitHub requests so far by HTTP status, from the controller's own metric."""
    out: dict[str, float] = {}
    for family in metrics.registry.collect():
        if family.name == "ci_autoscaler_github_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    status = sample.labels["status"]
                    out[status] = out.get(status, 0.0) + sample.value
    return out


@dataclass
class StaticPool:
    """An in-memory RunnerPool: one group per runner type holding its runners' instances."""

    pools: dict[str, PoolState]

    def describe(self, names: Sequence[str]) -> dict[str, PoolState]:
        return {n: self.pools[n] for n in names if n in self.pools}

    def set_desired_capacity(self, pool: str, desired: int) -> None:
        self.pools[pool] = replace(self.pools[pool], desired_capacity=desired)

    def protect_instances(self, pool: str, instance_ids: Sequence[str]) -> None:
        """Nothing to protect in memory."""

    def clock_skew(self) -> float | None:
        return None

    def terminate_instance(self, pool: str, instance_id: str) -> None:
        """Never called: the benchmark ticks with dry_run."""


class _NoParameters:
    """The parameter store of a benchmark that ticks with dry_run: never written to."""

    def put_secret(self, name: str, value: object, *, instance_id: str) -> None:
        raise AssertionError("the benchmark ticks with dry_run")

    def delete(self, name: str) -> bool:
        raise AssertionError("the benchmark ticks with dry_run")

    def list_names(self, path: str) -> list[str]:
        raise AssertionError("the benchmark ticks with dry_run")


def _pools(size: Size | Shape) -> StaticPool:
    types = type_names(size.types)
    instances: dict[str, list[Instance]] = {f"pool-{t}": [] for t in types}
    for j in range(size.runners):
        pool = f"pool-{types[j % len(types)]}"
        instances[pool].append(Instance(f"i-{j:017x}", pool, InstanceLifecycle.IN_SERVICE, T0))
    return StaticPool(
        {
            name: PoolState(name, 0, 10_000, len(found), tuple(found))
            for name, found in instances.items()
        }
    )


def httpx_floor(url: str, requests: int) -> float:
    """CPU milliseconds of one plain httpx GET (``/rate_limit``, one connection): what the
    HTTP client alone costs on this machine, measured in the same run."""
    headers = {"Authorization": "Bearer fake-token"}
    with httpx.Client(base_url=url, headers=headers, limits=httpx.Limits(max_connections=1)) as c:
        c.get("/rate_limit")
        cpu = _cpu()
        for _ in range(requests):
            c.get("/rate_limit")
        return 1000 * (_cpu() - cpu) / requests


def round_trip(url: str, path: str, requests: int) -> float:
    """Milliseconds of one GET of ``path`` on its own (sequential, one connection, nothing
    else in flight): the fake's latency plus both processes' time for one request, on
    this machine at this moment. What one step of a chain of dependent requests takes."""
    headers = {"Authorization": "Bearer fake-token"}
    with httpx.Client(base_url=url, headers=headers, limits=httpx.Limits(max_connections=1)) as c:
        c.get(path)
        started = time.perf_counter()
        for _ in range(requests):
            c.get(path)
        return 1000 * (time.perf_counter() - started) / requests


def run_controller(params: dict[str, Any]) -> None:
    size = Size(**params["size"]) if "size" in params else Shape(**params["shape"])
    types = type_names(size.types)
    raw = {
        "poll_interval": f"{params['interval']}s",
        "github": {
            "owner": params["owner"],
            "api_url": params["url"],
            "token": "fake-token",
            "max_concurrency": params["concurrency"],
        },
        "runner_types": {t: {"labels": ["self-hosted", t], "pools": [f"pool-{t}"]} for t in types},
        "alerts": {
            "rules": [
                {
                    "name": "Jobs queueing too long",
                    "team": "dev-infra",
                    "priority": "P2",
                    "description": "Jobs wait too long",
                    "max_queue_time": "60m",
                    "per_runner_type": True,
                    "receivers": ["oncall"],
                }
            ],
            "receivers": {"oncall": {"type": "webhook", "url": "http://127.0.0.1:9/never"}},
        },
    }
    config = parse_config(raw, env={})
    cut_polls = CutPolls()
    logging.getLogger("autoscaler.observe.github").addHandler(cut_polls)
    clock = {"now": T0.timestamp()}
    metrics = Metrics()
    with tempfile.TemporaryDirectory() as state_dir:
        store = SqliteStore(f"{state_dir}/state.db")
        source = GitHubSource(
            config.github,
            metrics,
            wall_clock=lambda: clock["now"],
            sleep=(lambda _: None) if params.get("virtual_sleep") else time.sleep,
            poll_interval=config.poll_interval,
            cache_store=store,
        )
        alerts = AlertEngine(config.alerts, store, None, metrics)
        scaler = Scaler(
            _pools(size), source, config, metrics, registrar=source, parameters=_NoParameters()
        )
        controller = Controller(config, source, metrics, alerts=alerts, scaler=scaler)

        def handle(command: dict[str, Any]) -> dict[str, Any]:
            if command["op"] == "floor":
                return {"cpu_ms": httpx_floor(params["url"], command["requests"])}
            if command["op"] == "round_trip":
                path = f"/repos/{params['owner']}/repo-0000/actions/runs?status=queued"
                return {"ms": round_trip(params["url"], path, command["requests"])}
            clock["now"] = command["t"]
            before, latency = _statuses(metrics), _latency_sum(metrics)
            asked = _listings(metrics)
            cuts = cut_polls.count
            cpu, started = _cpu(), time.perf_counter()
            result = controller.tick(datetime.fromtimestamp(command["t"], UTC), dry_run=True)
            wall, cpu = time.perf_counter() - started, _cpu() - cpu
            after = _statuses(metrics)
            statuses = {k: int(v - before.get(k, 0.0)) for k, v in after.items()}
            listings = {k: int(v - asked.get(k, 0.0)) for k, v in _listings(metrics).items()}
            observation = controller.last_observation
            budget = observation.budget if observation else None
            snapshot = result.snapshot
            ids = None
            if command.get("ids") and observation is not None:
                ids = sorted(
                    j.id
                    for j in observation.jobs
                    if j.status is JobStatus.QUEUED and not j.has_steps and not j.run_completed
                )
            queued = 0
            if snapshot is not None:
                stats = snapshot.per_type.values()
                queued = sum(s.queue_size for s in stats) + snapshot.unmatched_jobs
            return {
                "wall": wall,
                "cpu": cpu,
                "statuses": {k: v for k, v in statuses.items() if v},
                "listings": {k: v for k, v in listings.items() if v},
                "latency_sum": _latency_sum(metrics) - latency,
                "rss_mb": _peak_rss_mb(),
                "poll_error": result.poll_error,
                "partial": result.poll_partial,
                "cut": cut_polls.count > cuts,
                "queued": queued,
                "busy_interval": budget.busy_interval if budget else None,
                "too_small": budget.too_small if budget else None,
                "needed_per_hour": budget.needed_per_hour if budget else None,
                "ids": ids,
            }

        try:
            _serve(handle)
        finally:
            source.close()
            store.close()


if __name__ == "__main__":
    role, params = sys.argv[1], json.loads(sys.argv[2])
    {"fake": run_fake, "controller": run_controller}[role](params)
