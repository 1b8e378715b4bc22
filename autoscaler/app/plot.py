"""``simulate --plot``: queue wait and instances over time per policy, and p95 vs cost.

matplotlib is an optional extra (``pip install 'ci-autoscaler[plot]'``); importing this
module without it raises ImportError, which the command turns into one clear message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt

from autoscaler.sim.entities import Sample
from autoscaler.sim.metrics import PolicyResult

#: Time series drawn at most (a sweep draws its Pareto front's).
MAX_SERIES = 8
#: Samples are binned to this many seconds (the maximum of each bin) for a readable line.
BIN = 600.0


def _binned(
    samples: Sequence[Sample], value: Callable[[Sample], float]
) -> tuple[list[float], list[float]]:
    """(bin start in hours, the largest value in the bin)."""
    bins: dict[int, float] = {}
    for s in samples:
        key = int(s.at // BIN)
        bins[key] = max(bins.get(key, 0.0), value(s))
    keys = sorted(bins)
    return [k * BIN / 3600 for k in keys], [bins[k] for k in keys]


def draw(results: Sequence[PolicyResult], front: Sequence[PolicyResult], path: str) -> None:
    """Write a PNG (or whatever ``path``'s suffix names) with three panels."""
    series = list(front or results)[:MAX_SERIES]
    fig = plt.figure(figsize=(12, 8), layout="constrained")
    grid = fig.add_gridspec(2, 2)
    wait, fleet, scatter = (
        fig.add_subplot(grid[0, 0]),
        fig.add_subplot(grid[0, 1]),
        fig.add_subplot(grid[1, :]),
    )
    for r in series:
        wait.plot(*_binned(r.samples, lambda s: s.oldest_wait / 60), label=r.name, linewidth=0.9)
        fleet.plot(*_binned(r.samples, lambda s: float(s.instances)), label=r.name, linewidth=0.9)
    wait.set(
        title="longest wait of a queued job (max per 10 min)",
        xlabel="hours from trace start",
        ylabel="minutes",
    )
    fleet.set(
        title="instances: booting, idle, busy (max per 10 min)", xlabel="hours from trace start"
    )
    wait.legend(fontsize="small")
    on_front = {id(r) for r in front}
    for r in results:
        marker = "o" if id(r) in on_front or not front else "."
        scatter.scatter(r.runner_hours, r.p95_queue_seconds / 60, marker=marker)
        scatter.annotate(
            r.name,
            (r.runner_hours, r.p95_queue_seconds / 60),
            fontsize="small",
            xytext=(4, 4),
            textcoords="offset points",
        )
    if front:
        ordered = sorted(front, key=lambda r: r.runner_hours)
        scatter.plot(
            [r.runner_hours for r in ordered],
            [r.p95_queue_seconds / 60 for r in ordered],
            linestyle="--",
            linewidth=0.8,
            label="Pareto front",
        )
        scatter.legend(fontsize="small")
    scatter.set(
        title="p95 queue time vs runner-hours (lower left is better)",
        xlabel="runner-hours (launch to termination, boot included)",
        ylabel="p95 queue time (minutes)",
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_overview(
    traces: Sequence[tuple[str, Sequence[PolicyResult], float, float]], path: str, title: str
) -> None:
    """One p95-vs-runner-hours panel per trace; ``traces`` holds (name, results, the p95
    aim in seconds, drawn dotted, the oracle's runner-hours, drawn dashed)."""
    columns = 2
    rows = (len(traces) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(12, 4.2 * rows), layout="constrained")
    flat = list(axes.flat) if hasattr(axes, "flat") else [axes]
    names = list(dict.fromkeys(r.name for _, results, _, _ in traces for r in results))
    colours = {name: f"C{i % 10}" for i, name in enumerate(names)}
    for ax, (name, results, aim, oracle) in zip(flat, traces, strict=False):
        for r in results:
            ax.scatter(
                r.runner_hours, r.p95_queue_seconds / 60, color=colours[r.name], label=r.name, s=40
            )
        ax.axhline(aim / 60, linestyle=":", linewidth=0.8, color="grey")
        ax.axvline(oracle, linestyle="--", linewidth=0.8, color="grey")
        ax.set(title=name, xlabel="runner-hours", ylabel="p95 queue time (minutes)")
        ax.set_ylim(bottom=0)
    handles, labels = flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6))
    for ax in flat[len(traces) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    plt.close(fig)
