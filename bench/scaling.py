"""Benchmark: how good is the scaling? Held-out traces replayed through every policy.

Two sets of traces, kept apart (:mod:`autoscaler.sim.shapes`):

- **train** (``bench/traces/train/``: the fleets; the shapes are generated from their
  seeds): the only traces the defaults may be tuned on. ``--train`` prints them, judged
  by nothing;
- **test** (``bench/traces/test/*.jsonl``, generated once by ``--write-test`` and
  committed, other shapes and seeds), each also perturbed: twice the rate, a 30-job matrix
  every 10 minutes, boots of p50 30 s and of p50 180 s. The aims are judged here.

Each trace is replayed through this project's policy (its defaults) and every peer, as
they ship and with this project's knobs (``--equal-knobs``), beside the oracle's floor.
Aims, for this project's default policy, on every test trace and perturbation:

- at equal knobs no peer has both a lower p95 queue time and fewer runner-hours;
- runner-hours <= 1.10 x the oracle's (every job started at once, knowing the future);
- p95 queue time <= one cold start's p95 (launch + boot, the slowest pool) + one poll.

Also the replay's speed, virtual seconds per wall second at three trace lengths, this
project's policy and the scale set's side by side (aim: a day of trace in well under a
minute: >= 2,000x).

``python -m bench.scaling --write DIR`` writes the train traces (and copies the fleets)
for ``ci-autoscaler simulate``; ``--plot DIR`` also draws the overview (``scaling.png``,
docs/simulator.md's) and each unperturbed trace's plot (``scaling-<name>.png``), at
equal knobs.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.config import Config, load_config
from autoscaler.config.simulation import BootTime, LaunchTime
from autoscaler.sim import shapes
from autoscaler.sim.drivers import PEERS, equal_knobs_change
from autoscaler.sim.metrics import PolicyResult
from autoscaler.sim.oracle import Floor, floor
from autoscaler.sim.simulate import PROJECT, PROJECT_EPHEMERAL, simulate
from autoscaler.sim.trace import Trace, read_trace, write_trace
from bench import aims

TRACES = Path(__file__).resolve().parent / "traces"
TRAIN_DIR = TRACES / "train"
TEST_DIR = TRACES / "test"
COST_AIM = 1.10
SPEED_AIM = 2000.0


@dataclass(frozen=True)
class Case:
    name: str
    config: Config
    trace: Trace


@dataclass(frozen=True)
class Outcome:
    case: Case
    floor: Floor
    shipped: list[PolicyResult]
    """This project (and its ephemeral mode) and every peer as it ships."""
    equal: list[PolicyResult]
    """This project and every peer with this project's knobs."""

    @property
    def ours(self) -> PolicyResult:
        return self.shipped[0]


def fleet(path: Path) -> Config:
    return load_config(path, env={})


def with_boot(config: Config, p50: float, p95: float) -> Config:
    boot = BootTime(p50=p50, p95=p95)
    sim = config.simulation.model_copy(update={"boot_time": boot, "pools": ()})
    return config.model_copy(update={"simulation": sim})


PERTURBATIONS: dict[str, Callable[[Case], Case]] = {
    "2x rate": lambda c: replace(c, trace=shapes.doubled(c.trace, seed=1)),
    "+30 jobs/10m": lambda c: replace(c, trace=shapes.with_bursts(c.trace, seed=2)),
    "boot 30s": lambda c: replace(c, config=with_boot(c.config, 30.0, 80.0)),
    "boot 180s": lambda c: replace(c, config=with_boot(c.config, 180.0, 480.0)),
}


def train_cases() -> list[Case]:
    return [
        Case(name, fleet(TRAIN_DIR / f"{name}.yaml"), make()) for name, make in shapes.TRAIN.items()
    ]


def test_cases(perturb: bool = True) -> list[Case]:
    out = []
    for name in shapes.TEST:
        base = Case(name, fleet(TEST_DIR / f"{name}.yaml"), read_trace(TEST_DIR / f"{name}.jsonl"))
        out.append(base)
        if perturb:
            out.extend(
                replace(change(base), name=f"{name}, {label}")
                for label, change in PERTURBATIONS.items()
            )
    return out


def cold_start_p95(config: Config) -> float:
    """p95 of launch + boot for the type's slowest pool (20,000 seeded draws)."""
    sim = config.simulation
    pools = [p for rt in config.runner_types for p in rt.pools]
    rng = random.Random(0)

    def draw(latency: BootTime | LaunchTime) -> float:
        if latency.p95 <= latency.p50:
            return latency.p50
        sigma = math.log(latency.p95 / latency.p50) / 1.6448536269514722
        return rng.lognormvariate(math.log(latency.p50), sigma)

    worst = 0.0
    for name in pools:
        boot = sim.pool(name).boot_time or sim.boot_time
        draws = sorted(draw(sim.launch_time) + draw(boot) for _ in range(20000))
        worst = max(worst, draws[int(0.95 * len(draws))])
    return worst


def replay(case: Case) -> Outcome:
    c, t = case.config, case.trace
    ours = simulate(c, t, PROJECT)
    shipped = [ours, simulate(c, t, PROJECT_EPHEMERAL)]
    shipped += [simulate(c, t, name) for name in PEERS]
    same = {r.name: r for r in shipped}
    equal = [ours]
    for name in PEERS:
        differs = equal_knobs_change(c, name)
        equal.append(simulate(c, t, name, equal_knobs=True) if differs else same[name])
    return Outcome(case, floor(c, t), shipped, equal)


def p95_aim(config: Config) -> float:
    return cold_start_p95(config) + config.poll_interval


def judge(outcome: Outcome) -> list[str]:
    """The aims this trace misses (empty: all met)."""
    ours, missed = outcome.ours, []
    for peer in outcome.equal[1:]:
        if (
            peer.p95_queue_seconds < ours.p95_queue_seconds
            and peer.runner_hours < ours.runner_hours
        ):
            missed.append(f"{peer.name} (equal knobs) beats it on both p95 and runner-hours")
    aim = p95_aim(outcome.case.config)
    if ours.p95_queue_seconds > aim:
        missed.append(f"p95 {ours.p95_queue_seconds:.0f}s > cold start p95 + poll = {aim:.0f}s")
    ratio = ours.oracle_ratio(outcome.floor) or 0.0
    if ratio > COST_AIM:
        missed.append(f"runner-hours {ratio:.3f}x the oracle's > {COST_AIM}x")
    return missed


def _duration(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


def side_by_side(outcome: Outcome) -> str:
    """One row per policy: p95 and runner-hours / oracle as shipped and at equal knobs."""
    equal = {r.name: r for r in outcome.equal}
    header = (
        f"  {'policy':<28} {'p95':>6} {'x oracle':>8}"
        f"   {'equal knobs:':>12} {'p95':>6} {'x oracle':>8}"
    )
    lines = [header]
    for r in outcome.shipped:
        e = equal.get(r.name)
        cells = ""
        if e is not None:
            ratio = e.oracle_ratio(outcome.floor) or 0.0
            cells = f"{'':>12} {_duration(e.p95_queue_seconds):>6} {ratio:>8.3f}"
        lines.append(
            f"  {r.name:<28} {_duration(r.p95_queue_seconds):>6}"
            f" {r.oracle_ratio(outcome.floor) or 0:>8.3f}   {cells}"
        )
    return "\n".join(lines) + "\n"


def report(outcome: Outcome, judged: bool) -> bool:
    case = outcome.case
    hours = sum(j.duration for j in case.trace.jobs) / 3600
    print(
        f"{case.name}: {len(case.trace.jobs)} jobs, {hours:.0f} job-hours;"
        f" oracle {outcome.floor.zero_wait_hours:.1f} runner-h;"
        f" p95 aim {p95_aim(case.config):.0f}s"
    )
    print(side_by_side(outcome), end="")
    if not judged:
        print()
        return True
    missed = judge(outcome)
    met = aims.count(f"{case.name}: " + ("; ".join(missed) or "every aim of the trace"), not missed)
    print()
    return met


def speed() -> tuple[bool, str]:
    """Virtual seconds replayed per wall second at three trace lengths: this project's
    policy, and the scale set (it decides on every queued job: a replay whose cost grows
    faster than the trace shows here first)."""
    mix = [shapes.JobMix(shapes.CPU, 3.0, 0.2, 480.0, 1800.0)]
    config = fleet(TRAIN_DIR / "diurnal.yaml")
    rows, ok = [], True
    for days in (0.25, 1.0, 2.0):
        trace = shapes.generate(mix, days=days, seed=9)
        cells = []
        for name in (PROJECT, "scale-set"):
            started = time.perf_counter()
            result = simulate(config, trace, name)
            wall = time.perf_counter() - started
            ratio = result.end_seconds / wall
            ok &= days < 1 or ratio >= SPEED_AIM
            cells.append(f"{name} {wall:5.1f}s wall, {ratio:6.0f}x")
        rows.append(f"  {days:>4g} day(s), {len(trace.jobs):>5} jobs: " + "; ".join(cells))
    table = "replay speed (virtual / wall seconds):\n" + "\n".join(rows) + "\n"
    return ok, table


def machine() -> str:
    load = f", load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return (
        f"{datetime.now(UTC):%Y-%m-%d}, {platform.system()} {platform.machine()},"
        f" {os.cpu_count()} CPUs{load}, Python {platform.python_version()}"
    )


def run(plot_dir: Path | None = None, *, train: bool = False, perturb: bool = True) -> bool:
    which = "train" if train else "test"
    print(f"scaling: every {which} trace through every policy ({machine()})\n")
    ok = True
    overview = []
    for case in train_cases() if train else test_cases(perturb):
        outcome = replay(case)
        ok = report(outcome, judged=not train) and ok
        overview.append(
            (case.name, outcome.equal, p95_aim(case.config), outcome.floor.zero_wait_hours)
        )
        if plot_dir is not None and "," not in case.name:
            from autoscaler.app.plot import draw  # noqa: PLC0415 (matplotlib is optional)

            draw(outcome.equal, [], str(plot_dir / f"scaling-{case.name}.png"))
    if plot_dir is not None:
        from autoscaler.app.plot import draw_overview  # noqa: PLC0415 (matplotlib is optional)

        title = (
            f"p95 queue time vs runner-hours, {which} traces, equal knobs ({machine()});"
            " dotted: the p95 aim, dashed: the oracle"
        )
        draw_overview(overview, str(plot_dir / "scaling.png"), title)
    if train:
        return True
    fast, table = speed()
    print(table)
    return aims.timed(f"a day of trace replayed >= {SPEED_AIM:g}x real time", fast) and ok


def write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, make in shapes.TRAIN.items():
        trace: Trace = make()
        with open(directory / f"{name}.jsonl", "w", encoding="utf-8") as out:
            write_trace(trace, out)
        shutil.copy(TRAIN_DIR / f"{name}.yaml", directory / f"{name}.yaml")
        print(f"{directory / name}.jsonl ({len(trace.jobs)} jobs) and {name}.yaml")


def write_test() -> None:
    """Generate the held-out traces into ``bench/traces/test/`` (once: they are committed)."""
    for name, make in shapes.TEST.items():
        trace = make()
        with open(TEST_DIR / f"{name}.jsonl", "w", encoding="utf-8") as out:
            write_trace(trace, out)
        print(f"{TEST_DIR / name}.jsonl ({len(trace.jobs)} jobs)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.scaling")
    parser.add_argument("--write", type=Path, help="write the train traces and fleets here")
    parser.add_argument("--write-test", action="store_true", help="generate the test traces")
    parser.add_argument("--train", action="store_true", help="the train traces, not judged")
    parser.add_argument("--no-perturb", action="store_true", help="the test traces alone")
    parser.add_argument("--plot", type=Path, help="also draw the overview here")
    args = parser.parse_args()
    if args.write:
        write(args.write)
        sys.exit(0)
    if args.write_test:
        write_test()
        sys.exit(0)
    if args.plot:
        args.plot.mkdir(parents=True, exist_ok=True)
    sys.exit(0 if run(args.plot, train=args.train, perturb=not args.no_perturb) else 1)
