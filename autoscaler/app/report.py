"""Rendering a tick for people (an aligned table) and for programs (one JSON object)."""

from __future__ import annotations

import dataclasses
from typing import Any

from autoscaler.controller import TickResult
from autoscaler.job_retry.decide import RetryReport


def _plain(value: Any) -> Any:
    """A stage's result as JSON-ready data: its own to_dict/as_dict, else its fields."""
    for method in ("to_dict", "as_dict"):
        if hasattr(value, method):
            return getattr(value, method)()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def retries_json(report: RetryReport) -> dict[str, Any]:
    """What job retry decided this tick: ``run_retries``, one entry per run attempt (the
    verdict, the lost jobs, those the loss cancelled, the result, why, what was asked), and
    ``job_retries``, one line per judged job (its own evidence, its run's result)."""
    return {
        "run_retries": [c.as_dict() for c in report.choices],
        "job_retries": [line for c in report.choices for line in c.job_lines()],
    }


def to_json(result: TickResult) -> dict[str, Any]:
    """The ``once --output json`` object."""
    snap = result.snapshot
    types = []
    if snap is not None:
        for name, stats in snap.per_type.items():
            types.append(
                {
                    "name": name,
                    "queue_size": stats.queue_size,
                    "max_queue_time_seconds": round(stats.max_queue_time_seconds, 3),
                    "ghost_jobs": stats.ghost_jobs,
                    "runners": {
                        "idle": stats.runners.idle,
                        "busy": stats.runners.busy,
                        "offline": stats.runners.offline,
                    },
                    "causes": [c.as_dict() for c in result.causes.get(name, ())],
                }
            )
    return {
        "observed_at": (snap.observed_at if snap else result.now).isoformat(),
        "poll_error": result.poll_error,
        "poll_partial": result.poll_partial,
        "runner_types": types,
        "unmatched_jobs": snap.unmatched_jobs if snap else 0,
        "ghost_jobs": snap.ghost_jobs if snap else 0,
        "alerts": [_plain(a) for a in result.alerts],
        "decisions": [_plain(d) for d in result.decisions],
        "warm_sizes": warm_sizes_json(result),
        **({} if result.retries is None else retries_json(result.retries)),
    }


def warm_sizes_json(result: TickResult) -> list[dict[str, Any]]:
    """The hot and warm capacity decided from each type's objective (``size: slo``)."""
    plan = result.scaling.plan if result.scaling is not None else None
    return [
        {"runner_type": w.runner_type, **w.as_dict()}
        for w in (plan.warm_sizes if plan is not None else ())
    ]


def _fmt_age(seconds: float) -> str:
    if seconds <= 0:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def align(rows: list[list[str]], right: set[int]) -> str:
    """Columns padded to their widest cell; ``right`` holds right-aligned column indexes."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def format_table(result: TickResult) -> str:
    """A tidy per-runner-type table, then alerts and decisions, for a person."""
    snap = result.snapshot
    when = (snap.observed_at if snap else result.now).strftime("%Y-%m-%d %H:%M:%S UTC")
    out = [f"observed at {when}"]
    if result.poll_error:
        # A fresh process (`once`) has no earlier picture: saying it shows one misled.
        shown = "showing the last good picture" if snap else "nothing seen yet"
        out.append(f"poll failed: {result.poll_error} ({shown})")
    if result.poll_partial:
        out.append(f"poll partial: {result.poll_partial}")
    rows = [["RUNNER TYPE", "QUEUED", "MAX WAIT", "IDLE", "BUSY", "OFFLINE", "GHOSTS"]]
    if snap is not None:
        for name, s in snap.per_type.items():
            rows.append(
                [
                    name,
                    str(s.queue_size),
                    _fmt_age(s.max_queue_time_seconds),
                    str(s.runners.idle),
                    str(s.runners.busy),
                    str(s.runners.offline),
                    str(s.ghost_jobs),
                ]
            )
        rows.append(
            [
                "(unmatched)",
                str(snap.unmatched_jobs),
                _fmt_age(snap.unmatched_ages_seconds[0] if snap.unmatched_ages_seconds else 0),
                "",
                "",
                "",
                "",
            ]
        )
    out.append(align(rows, right={1, 2, 3, 4, 5, 6}).rstrip("\n"))
    alerts = [_plain(a) for a in result.alerts]
    if alerts:
        out.append("")
        out.append(
            align(
                [["ALERT", "STATE", "FINGERPRINT"]]
                + [
                    [
                        str(a.get("title", a.get("rule"))),
                        str(a.get("state")),
                        str(a.get("fingerprint")),
                    ]
                    for a in alerts
                ],
                right=set(),
            ).rstrip("\n")
        )
    decisions = [_plain(d) for d in result.decisions]
    if decisions:
        out.append("")
        out.append(
            align(
                [["RUNNER TYPE", "POOL", "CURRENT", "DESIRED", "REASON"]]
                + [
                    [
                        str(d.get("runner_type")),
                        str(d.get("pool")),
                        str(d.get("current")),
                        str(d.get("desired")),
                        str(d.get("reason")),
                    ]
                    for d in decisions
                ],
                right={2, 3},
            ).rstrip("\n")
        )
    return "\n".join(out) + "\n"
