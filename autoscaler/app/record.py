"""``ci-autoscaler record``: wire :class:`JobHistory` to a trace file and say what it did."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import TextIO

from autoscaler.config import Config
from autoscaler.errors import AutoscalerError
from autoscaler.observe.github.history import JobHistory, parse_since
from autoscaler.sim.trace import trace_line
from autoscaler.telemetry import Metrics


@contextlib.contextmanager
def _opened(path: str) -> Iterator[TextIO]:
    if path == "-":
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8") as handle:
        yield handle


def run_record(config: Config, since_text: str, out_path: str, budget: int, now: datetime) -> int:
    """The ``record`` command. Returns the exit status (0 also when the budget ran out: the
    trace is complete up to where the summary says)."""
    try:
        since = parse_since(since_text, now)
    except ValueError:
        print(
            f"--since {since_text!r}: use 7d, 36h or an ISO date like 2026-11-23", file=sys.stderr
        )
        return 1
    if since >= now or budget < 1:
        print("record: --since must be in the past and --max-requests >= 1", file=sys.stderr)
        return 1
    history = JobHistory(config, Metrics(), max_requests=budget)
    try:
        with _opened(out_path) as out:

            def sink(created: datetime, labels: list[str], duration: float, queued: float) -> None:
                line = trace_line(created, labels, duration, queue_seconds=round(queued, 3))
                out.write(line + "\n")

            summary = history.record(since, now, sink)
    except OSError as exc:
        print(f"{out_path}: cannot write: {exc.strerror}", file=sys.stderr)
        return 1
    except AutoscalerError as exc:
        print(f"record: GitHub failed ({exc.kind}): {exc}", file=sys.stderr)
        return 2
    finally:
        history.close()
    print(summary.describe(since, budget), file=sys.stderr)
    return 0
