"""Benchmark: warm pools sized from the objective, against cold launches alone.

Each test trace (``bench/traces/test/``, never tuned on) is replayed twice through this
project's policy, side by side, with the same knobs: every runner type gets
``slo: {queue_time: 45s, objective: 0.95}`` and the fleet gets webhooks (a decision
about a second after a job is queued, besides the 30 s polls). The first run has cold
launches only; the second puts a ``size: slo`` warm pool on each type's first pool, so
the policy decides its hot and warm capacity. The emulator draws warm starts from
``simulation.warm_start`` (p50 20 s, p95 40 s) beside the fleets' cold boots (p50 90 s,
p95 240 s, launches p50 10 s).

Aims, with warm pools, on every test trace: p95 queue time <= 45 s, at compute
runner-hours <= 1.10x the oracle's zero-wait floor (:mod:`autoscaler.sim.oracle`). The
stopped instances' storage hours are printed beside them (never in runner-hours).

``python -m bench.warm_pools --train`` replays the train shapes instead (not judged):
the only traces the sizing's defaults may be tuned on.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autoscaler.config import Config, parse_config
from autoscaler.sim import shapes
from autoscaler.sim.metrics import PolicyResult
from autoscaler.sim.oracle import floor
from autoscaler.sim.simulate import simulate
from autoscaler.sim.trace import Trace, read_trace
from bench import aims
from bench.scaling import COST_AIM, TEST_DIR, TRAIN_DIR, machine

P95_AIM = 45.0
OBJECTIVE = {"queue_time": "45s", "objective": 0.95}


@dataclass(frozen=True)
class Row:
    name: str
    jobs: int
    oracle_hours: float
    cold: PolicyResult
    warm: PolicyResult

    def ratio(self, result: PolicyResult) -> float:
        return result.runner_hours / self.oracle_hours if self.oracle_hours > 0 else 0.0


def configs(path: Path) -> tuple[Config, Config]:
    """(cold only, warm pools) for one fleet file: the same objective and webhooks."""
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["webhook"] = {"secret": "not-used-by-simulate"}
    for rt in doc["runner_types"].values():
        rt["slo"] = dict(OBJECTIVE)
    cold = parse_config(doc, env={})
    doc["pools"] = {
        rt["pools"][0]: {"warm_pool": {"size": "slo"}}
        for rt in doc["runner_types"].values()
        if rt.get("pools")
    }
    return cold, parse_config(doc, env={})


def replay(name: str, path: Path, trace: Trace) -> Row:
    cold, warm = configs(path)
    oracle = floor(cold, trace).zero_wait_hours
    return Row(name, len(trace.jobs), oracle, simulate(cold, trace), simulate(warm, trace))


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value < 120 else f"{value / 60:.1f}m"


def table(rows: list[Row]) -> str:
    header = (
        f"  {'trace':<14} {'jobs':>6} {'oracle h':>9}   {'p95 cold':>8} {'x oracle':>8}"
        f"   {'p95 warm':>8} {'x oracle':>8} {'storage h':>9} {'warm starts':>11}"
    )
    lines = [header]
    for r in rows:
        lines.append(
            f"  {r.name:<14} {r.jobs:>6} {r.oracle_hours:>9.1f}"
            f"   {_seconds(r.cold.p95_queue_seconds):>8} {r.ratio(r.cold):>8.3f}"
            f"   {_seconds(r.warm.p95_queue_seconds):>8} {r.ratio(r.warm):>8.3f}"
            f" {r.warm.storage_hours:>9.1f} {r.warm.warm_starts:>11}"
        )
    return "\n".join(lines) + "\n"


def cases(train: bool) -> list[tuple[str, Path, Trace]]:
    if train:
        return [(n, TRAIN_DIR / f"{n}.yaml", make()) for n, make in shapes.TRAIN.items()]
    return [(n, TEST_DIR / f"{n}.yaml", read_trace(TEST_DIR / f"{n}.jsonl")) for n in shapes.TEST]


def run(*, train: bool = False) -> bool:
    which = "train" if train else "test"
    print(f"warm_pools: every {which} trace, cold launches only vs warm pools ({machine()})\n")
    rows = []
    for name, path, trace in cases(train):
        rows.append(replay(name, path, trace))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print("\n" + table(rows))
    if train:
        return True
    ok = True
    for r in rows:
        p95, ratio = r.warm.p95_queue_seconds, r.ratio(r.warm)
        missed = []
        if p95 > P95_AIM:
            missed.append(f"p95 {p95:.0f}s > {P95_AIM:.0f}s")
        if ratio > COST_AIM:
            missed.append(f"runner-hours {ratio:.3f}x the oracle's > {COST_AIM}x")
        what = "; ".join(missed) or f"p95 <= {P95_AIM:.0f}s at <= {COST_AIM}x the oracle"
        ok = aims.count(f"{r.name} with warm pools: {what}", not missed) and ok
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.warm_pools")
    parser.add_argument("--train", action="store_true", help="the train traces, not judged")
    sys.exit(0 if run(train=parser.parse_args().train) else 1)
