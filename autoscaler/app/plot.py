"""``simulate --plot``: queue wait and instances over time per policy, and p95 vs cost.

matplotlib is an optional extra (``pip install 'ci-autoscaler[plot]'``); importing this
module without it raises ImportError, which the command turns into one clear message.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt

from autoscaler.sim.metrics import PolicyResult

#: Time series drawn at most (a sweep draws its Pareto front's).
MAX_SERIES = 8


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
        hours = [s.at / 3600 for s in r.samples]
        wait.plot(hours, [s.oldest_wait / 60 for s in r.samples], label=r.name, linewidth=0.9)
        fleet.plot(hours, [s.instances for s in r.samples], label=r.name, linewidth=0.9)
    wait.set(title="oldest queued job's wait", xlabel="hours from trace start", ylabel="minutes")
    fleet.set(title="instances (booting, idle, busy)", xlabel="hours from trace start")
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
