"""Benchmark: how good is the scaling? Each shipped trace replayed through every policy.

The traces are generated deterministically (:mod:`autoscaler.sim.shapes`: a diurnal day,
matrix bursts of 50-300 jobs, long GPU jobs, a GPU spot outage); each has a fleet in
``bench/traces/<name>.yaml`` that describes pools only, so this project runs with its
default knobs. Aims, per trace, for this project's policy:

- no peer has both a lower p95 queue time and fewer runner-hours;
- p95 queue time <= the slowest pool's boot p95 + one poll interval;
- runner-hours <= 1.15 x their lower bound (job durations + one boot per launch).

Printed beside them, not judged: this project with ``min_idle.predict`` (warm runners from
the recent arrival rate, an option).

Also the replay's speed, virtual seconds per wall second at three trace lengths, side by
side (aim: a day of trace in well under a minute: >= 2,000x).

``python -m bench.scaling --write DIR`` writes the traces (and copies the fleets) for
``ci-autoscaler simulate``; ``--plot DIR`` also draws an overview (``scaling.png``, the
README's) and each trace's plot.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.config import Config, load_config
from autoscaler.config.schedule import Prediction
from autoscaler.sim import shapes
from autoscaler.sim.metrics import PolicyResult, format_table
from autoscaler.sim.simulate import PROJECT, simulate, simulate_all
from autoscaler.sim.trace import Trace, write_trace
from bench import aims

TRACES = Path(__file__).resolve().parent / "traces"
COST_AIM = 1.15
SPEED_AIM = 2000.0


def fleet(name: str) -> Config:
    return load_config(TRACES / f"{name}.yaml", env={})


def slowest_boot_p95(config: Config) -> float:
    sim = config.simulation
    pools = [p for rt in config.runner_types for p in rt.pools]
    return max((sim.pool(p).boot_time or sim.boot_time).p95 for p in pools)


def predicting(config: Config) -> Config:
    """The same fleet with ``min_idle.predict`` (its defaults) on every runner type."""
    types = tuple(
        rt.model_copy(update={"min_idle": rt.min_idle.model_copy(update={"predict": Prediction()})})
        for rt in config.runner_types
    )
    return config.model_copy(update={"runner_types": types})


def judge(config: Config, results: list[PolicyResult]) -> list[str]:
    """The aims this trace misses (empty: all met)."""
    ours = next(r for r in results if r.name == PROJECT)
    missed = []
    for peer in results:
        if peer is not ours and (
            peer.p95_queue_seconds < ours.p95_queue_seconds
            and peer.runner_hours < ours.runner_hours
        ):
            missed.append(f"{peer.name} beats it on both p95 and runner-hours")
    bound = slowest_boot_p95(config) + config.poll_interval
    if ours.p95_queue_seconds > bound:
        missed.append(f"p95 {ours.p95_queue_seconds:.0f}s > boot p95 + poll = {bound:.0f}s")
    if ours.cost_ratio > COST_AIM:
        missed.append(f"runner-hours {ours.cost_ratio:.2f}x the lower bound > {COST_AIM}x")
    return missed


def speed() -> tuple[bool, str]:
    """Virtual seconds replayed per wall second, this project's policy, three lengths."""
    mix = [shapes.JobMix(shapes.CPU, 3.0, 0.2, 480.0, 1800.0)]
    config = fleet("diurnal")
    rows, ok = [], True
    for days in (0.25, 1.0, 2.0):
        trace = shapes.generate(mix, days=days, seed=9)
        started = time.perf_counter()
        result = simulate(config, trace)
        wall = time.perf_counter() - started
        ratio = result.end_seconds / wall
        ok &= days < 1 or ratio >= SPEED_AIM
        rows.append(
            f"  {days:>4g} day(s), {len(trace.jobs):>5} jobs: {wall:5.1f}s wall, {ratio:6.0f}x"
        )
    table = "replay speed (virtual / wall seconds):\n" + "\n".join(rows) + "\n"
    return ok, table


def machine() -> str:
    return (
        f"{datetime.now(UTC):%Y-%m-%d}, {platform.system()} {platform.machine()},"
        f" {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )


def run(plot_dir: Path | None = None) -> bool:
    print(f"scaling: every shipped trace through every policy ({machine()})\n")
    ok = True
    overview = []
    for name, make in shapes.SHAPES.items():
        config, trace = fleet(name), make()
        results = simulate_all(config, trace)
        missed = judge(config, results)
        results.insert(1, simulate(predicting(config), trace, label=f"{PROJECT} +predict"))
        hours = sum(j.duration for j in trace.jobs) / 3600
        print(f"{name}: {len(trace.jobs)} jobs, {hours:.0f} job-hours")
        print(format_table(results), end="")
        ok &= aims.count(f"{name}: " + ("; ".join(missed) or "every aim of the trace"), not missed)
        print()
        overview.append((name, results, slowest_boot_p95(config) + config.poll_interval))
        if plot_dir is not None:
            from autoscaler.app.plot import draw  # noqa: PLC0415 (matplotlib is optional)

            draw(results, [], str(plot_dir / f"scaling-{name}.png"))
    if plot_dir is not None:
        from autoscaler.app.plot import draw_overview  # noqa: PLC0415

        title = f"p95 queue time vs runner-hours per shipped trace ({machine()}); dotted: the aim"
        draw_overview(overview, str(plot_dir / "scaling.png"), title)
    fast, table = speed()
    print(table)
    return aims.timed(f"a day of trace replayed >= {SPEED_AIM:g}x real time", fast) and ok


def write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, make in shapes.SHAPES.items():
        trace: Trace = make()
        with open(directory / f"{name}.jsonl", "w", encoding="utf-8") as out:
            write_trace(trace, out)
        shutil.copy(TRACES / f"{name}.yaml", directory / f"{name}.yaml")
        print(f"{directory / name}.jsonl ({len(trace.jobs)} jobs) and {name}.yaml")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.scaling")
    parser.add_argument("--write", type=Path, help="write the traces and fleets here and exit")
    parser.add_argument("--plot", type=Path, help="also draw each trace's plot here")
    args = parser.parse_args()
    if args.write:
        write(args.write)
        sys.exit(0)
    if args.plot:
        args.plot.mkdir(parents=True, exist_ok=True)
    sys.exit(0 if run(args.plot) else 1)
