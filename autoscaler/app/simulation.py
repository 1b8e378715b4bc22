"""``ci-autoscaler simulate``: read a trace, replay it per policy (or over a sweep), print.

Every result is set against the oracle (:mod:`autoscaler.sim.oracle`): the fewest
runner-hours that start every job at once, knowing the future. ``--equal-knobs`` gives
the peers this project's poll interval (or reaction), idle timeout and min_idle wherever
they have such a knob. Results go to standard output (a table, or one JSON object with
``--output json``); problems go to standard error with exit status 1.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from autoscaler.config import Config
from autoscaler.sim.metrics import PolicyResult, format_table
from autoscaler.sim.oracle import Floor, floor
from autoscaler.sim.project import reaction_of
from autoscaler.sim.simulate import POLICIES, simulate
from autoscaler.sim.sweep import SweepError, grid, pareto_front, parse_sweep
from autoscaler.sim.trace import Trace, TraceError, read_trace


def _problem(message: str) -> int:
    print(message, file=sys.stderr)
    return 1


def run_simulate(  # noqa: PLR0917 (the CLI's arguments, one to one)
    config: Config,
    trace_path: str,
    policies: Sequence[str] | None,
    output: str,
    plot: str | None,
    sweep: Sequence[str],
    out: TextIO | None = None,
    *,
    equal_knobs: bool = False,
) -> int:
    """The ``simulate`` command (results to ``out``, default standard output). Returns the
    exit status."""
    out = out or sys.stdout
    if not any(rt.pools for rt in config.runner_types):
        return _problem("simulate: no runner type names pools: nothing to scale")
    try:
        knobs = parse_sweep(sweep)
        trace = read_trace(trace_path)
    except SweepError as exc:
        return _problem(str(exc))
    except TraceError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    if not trace.jobs:
        return _problem(f"{trace_path}: the trace has no jobs")
    started = time.perf_counter()
    oracle = floor(config, trace)
    if knobs:
        results = [simulate(c, trace, label=label) for label, c in grid(config, knobs)]
        front = pareto_front(results)
    else:
        names = list(dict.fromkeys(policies or POLICIES))
        results = [simulate(config, trace, name, equal_knobs=equal_knobs) for name in names]
        front = []
    elapsed = time.perf_counter() - started
    if output == "json":
        body: dict[str, Any] = {
            "policies": [r.as_json(oracle) for r in results],
            "oracle": _oracle_json(oracle),
            "equal_knobs": equal_knobs,
        }
        if knobs:
            body["pareto_front"] = [r.name for r in front]
        body["trace"] = _trace_summary(trace)
        out.write(json.dumps(body, indent=2) + "\n")
    else:
        out.write(_header(trace, config, elapsed))
        out.write(_oracle_line(oracle))
        if knobs:
            out.write(
                f"Pareto front of {len(results)} settings (p95 queue time vs runner-hours):\n"
            )
            out.write(format_table(front, oracle))
        else:
            if equal_knobs:
                out.write("peers with this project's poll interval, idle timeout and min_idle\n")
            out.write(format_table(results, oracle))
    if plot:
        return _plot(results, front, plot)
    return 0


def _trace_summary(trace: Trace) -> dict[str, Any]:
    return {
        "jobs": len(trace.jobs),
        "start": trace.start.isoformat(),
        "span_hours": round(trace.span / 3600, 2),
        "job_hours": round(sum(j.duration for j in trace.jobs) / 3600, 2),
    }


def _oracle_json(oracle: Floor) -> dict[str, Any]:
    return {
        "runner_hours": round(oracle.zero_wait_hours, 2),
        "frontier": [
            {"max_wait_seconds": p.max_wait_seconds, "runner_hours": round(p.runner_hours, 2)}
            for p in oracle.frontier()
        ],
        "runner_types": [t.as_json() for t in oracle.types],
    }


def _oracle_line(oracle: Floor) -> str:
    waits = ", ".join(
        f"{p.runner_hours:.1f} within {p.max_wait_seconds:g}s"
        for p in oracle.frontier()
        if p.max_wait_seconds > 0
    )
    return (
        f"oracle (every job at once, knowing the future): {oracle.zero_wait_hours:.1f}"
        f" runner-h; letting jobs wait: {waits}\n\n"
    )


def _header(trace: Trace, config: Config, elapsed: float) -> str:
    sim = config.simulation
    reaction = reaction_of(config)
    react = f", reaction {reaction:g}s" if reaction is not None else ""
    return (
        f"{len(trace.jobs)} jobs over {trace.span / 3600:.1f}h"
        f" from {trace.start:%Y-%m-%d %H:%M} UTC;"
        f" launch p50 {sim.launch_time.p50:g}s, boot p50 {sim.boot_time.p50:g}s"
        f" p95 {sim.boot_time.p95:g}s;"
        f" poll every {config.poll_interval:g}s (+{sim.poll_latency:g}s){react};"
        f" {len(sim.outages)} outage(s); replayed in {elapsed:.1f}s\n"
    )


def _plot(results: Sequence[PolicyResult], front: Sequence[PolicyResult], path: str) -> int:
    try:
        from autoscaler.app.plot import draw  # noqa: PLC0415 (matplotlib is optional)
    except ImportError:
        return _problem("simulate --plot needs matplotlib: pip install 'ci-autoscaler[plot]'")
    draw(results, front, path)
    print(f"plot written to {path}", file=sys.stderr)
    return 0
