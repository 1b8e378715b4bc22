"""A trace: the jobs of a period, one JSON object a line, to replay through a policy.

```json
{"created_at": "2026-11-30T03:12:00Z", "labels": ["self-hosted", "linux.4xlarge"], "duration": 1260}
{"created_at": 95.5, "labels": ["self-hosted", "linux.4xlarge"], "duration": 60}
```

- ``created_at``: an ISO-8601 time, or seconds from the trace's start. The start is
  00:00 UTC of the day of the earliest ISO time in the file (so an outage ``from: 10h``
  means 10:00 UTC that day; numbers count from there too); a file of numbers only starts
  at :data:`DEFAULT_START`, a Monday 00:00 UTC, so ``min_idle`` schedules see a real week.
- ``labels``: the job's ``runs-on`` labels (compared case-insensitively).
- ``duration``: seconds the job ran (``completed_at - started_at``).
- Any other key is ignored (``ci-autoscaler record`` adds ``queue_seconds``, the queue
  time the job really had: informative only).

A bad line is reported with its number, every one at once (:class:`TraceError`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from autoscaler.domain import normalize_labels

DEFAULT_START = datetime(2026, 11, 30, tzinfo=UTC)
"""Where a trace of relative times starts (a Monday)."""
MAX_PROBLEMS = 20


class TraceError(Exception):
    """A trace that cannot be read; ``problems`` names each bad line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class TraceJob:
    created_at: float
    """Seconds from the trace's start."""
    labels: frozenset[str]
    duration: float


@dataclass(frozen=True)
class Trace:
    start: datetime
    """Time zero (UTC)."""
    jobs: tuple[TraceJob, ...]
    """Ordered by ``created_at``."""

    @property
    def span(self) -> float:
        """Seconds from the start to the last job's creation."""
        return self.jobs[-1].created_at if self.jobs else 0.0

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    def offset(self, when: datetime) -> float:
        return (when - self.start).total_seconds()


def _iso(text: str) -> datetime:
    parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _row(item: Any) -> tuple[float | datetime, frozenset[str], float]:
    """(created_at, labels, duration) of one parsed line; ValueError says what is wrong."""
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    created, labels, duration = item.get("created_at"), item.get("labels"), item.get("duration")
    when: float | datetime
    if isinstance(created, str):
        try:
            when = _iso(created)
        except ValueError:
            raise ValueError(f"created_at {created!r} is not an ISO-8601 time") from None
    elif isinstance(created, (int, float)) and not isinstance(created, bool):
        if not math.isfinite(created) or created < 0:
            raise ValueError("created_at must be >= 0 seconds from the start")
        when = float(created)
    else:
        raise ValueError("created_at must be an ISO-8601 time or seconds from the start")
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise ValueError("labels must be a list of strings")
    if (
        not isinstance(duration, (int, float))
        or isinstance(duration, bool)
        or not math.isfinite(duration)
        or duration < 0
    ):
        raise ValueError("duration must be a number of seconds >= 0")
    return when, normalize_labels(labels), float(duration)


def parse_trace(lines: Iterable[str], source: str = "trace") -> Trace:
    """Read JSON lines (blank lines skipped). Raises TraceError listing bad lines."""
    rows: list[tuple[float | datetime, frozenset[str], float]] = []
    problems: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(_row(json.loads(line)))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            if len(problems) < MAX_PROBLEMS:
                problems.append(f"{source}:{number}: {exc}")
            else:
                problems[-1] = f"{source}: more bad lines after line {number - 1}"
    if problems:
        raise TraceError(problems)
    times = [when for when, _, _ in rows if isinstance(when, datetime)]
    start = DEFAULT_START
    if times:
        start = min(times).replace(hour=0, minute=0, second=0, microsecond=0)
    jobs = [
        TraceJob(
            (when - start).total_seconds() if isinstance(when, datetime) else when,
            labels,
            duration,
        )
        for when, labels, duration in rows
    ]
    jobs.sort(key=lambda j: j.created_at)
    return Trace(start, tuple(jobs))


def read_trace(path: str | Path) -> Trace:
    """Read a trace file. Raises TraceError (OSError included, as one problem)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_trace(handle, source=str(path))
    except OSError as exc:
        raise TraceError([f"{path}: cannot read: {exc.strerror}"]) from None


def trace_line(created_at: datetime, labels: Iterable[str], duration: float, **extra: Any) -> str:
    """One trace line (no newline): ISO time, labels as given, duration in seconds."""
    utc = created_at.astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond // 1000:03d}"
    body = {
        "created_at": text + "Z",
        "labels": list(labels),
        "duration": round(duration, 3),
        **extra,
    }
    return json.dumps(body, separators=(", ", ": "))


def write_trace(trace: Trace, out: TextIO) -> int:
    """Write ``trace`` as JSON lines with ISO times; returns the number of lines."""
    for job in trace.jobs:
        out.write(trace_line(trace.at(job.created_at), sorted(job.labels), job.duration) + "\n")
    return len(trace.jobs)
