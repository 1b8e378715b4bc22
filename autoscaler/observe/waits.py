"""Where a job's wait went: its queue time split into stages, and their recent quantiles (pure).

For a job that started on a runner this controller asked for, five moments are known:
the job created (GitHub), first seen by us (a poll or a webhook), capacity asked (the
scale-up its instance answers), the instance running (EC2's launch time: for a warm
instance, the time it was started again), its runner online (first seen online), and
the job started (GitHub). The stages are the gaps between them:

- ``github_lag``: created -> first seen;
- ``decision``: first seen -> capacity asked;
- ``launch``: asked -> instance running (or a warm instance back in service);
- ``boot``: running -> runner online;
- ``assignment``: runner online -> job started.

Each moment is clamped between the one before it and the start, so the stages never go
negative and always add up to the queue time (``started - created``) exactly: a moment
that came before the job was seen (a runner already booting when the job arrived) makes
its stage zero. The moments we saw (first seen, online) are as precise as the poll.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

from autoscaler.domain import STAGES, JobWait


def wait_stages(  # noqa: PLR0917 (the moments, in the order they happen)
    created: datetime,
    seen: datetime | None,
    asked: datetime | None,
    running: datetime | None,
    online: datetime | None,
    started: datetime,
) -> tuple[float, ...]:
    """The five stages' seconds; an unknown moment (None) is the one before it."""
    points = [created]
    for raw in (seen, asked, running, online):
        last = points[-1]
        at = last if raw is None else min(max(raw, last), max(started, last))
        points.append(at)
    points.append(max(started, points[-1]))
    return tuple((b - a).total_seconds() for a, b in pairwise(points))


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank; 0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
    return ordered[rank - 1]


@dataclass(frozen=True)
class StageSummary:
    """A runner type's recent waits: per stage, the median and the 95th percentile."""

    runner_type: str
    jobs: int
    p50: Mapping[str, float]
    p95: Mapping[str, float]
    queue_p50: float
    queue_p95: float


class RecentWaits:
    """The last ``keep`` waits per runner type, summarised for ``explain`` and the page."""

    def __init__(self, keep: int = 500) -> None:
        self.keep = keep
        self._waits: dict[str, deque[JobWait]] = {}

    def add(self, waits: Sequence[JobWait]) -> None:
        for w in waits:
            self._waits.setdefault(w.runner_type, deque(maxlen=self.keep)).append(w)

    def summary(self) -> dict[str, StageSummary]:
        out = {}
        for name, waits in sorted(self._waits.items()):
            columns = {s: [w.stages[i] for w in waits] for i, s in enumerate(STAGES)}
            totals = [w.total for w in waits]
            out[name] = StageSummary(
                name,
                len(waits),
                {s: quantile(v, 0.5) for s, v in columns.items()},
                {s: quantile(v, 0.95) for s, v in columns.items()},
                quantile(totals, 0.5),
                quantile(totals, 0.95),
            )
        return out
