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

:func:`stage_regressions` judges, per runner type and stage, whether the stage regressed:
the p95 of the jobs that started in the last ``recent`` against the p95 of those that
started in the ``baseline`` right before it. Both windows need ``min_jobs`` jobs (at least
20, so that one slow job is never a window's p95 alone), and the p95 must have grown by
``min_growth_pct`` percent and by ``min_increase`` seconds (a 2 s stage doubling to 4 s
pages nobody).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import TYPE_CHECKING

from autoscaler.domain import STAGES, JobWait

if TYPE_CHECKING:
    from autoscaler.config import StageRegressionConfig


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


@dataclass(frozen=True)
class StageRegression:
    """One stage of one runner type's wait, judged: its p95 in the baseline window and in
    the recent one, and whether that is a regression."""

    runner_type: str
    stage: str
    baseline_p95: float
    recent_p95: float
    baseline_jobs: int
    recent_jobs: int
    regressed: bool


def stage_regressions(
    waits: Sequence[JobWait], now: datetime, rule: StageRegressionConfig
) -> list[StageRegression]:
    """Every stage of every runner type with a job in either window, judged by ``rule``
    (the waits' ``started_at`` place them; a wait without one is left out)."""
    recent_from = now - timedelta(seconds=rule.recent)
    baseline_from = recent_from - timedelta(seconds=rule.baseline)
    windows: dict[str, tuple[list[JobWait], list[JobWait]]] = {}
    for w in waits:
        at = w.started_at
        if at is None or not baseline_from <= at <= now:
            continue
        baseline, recent = windows.setdefault(w.runner_type, ([], []))
        (recent if at > recent_from else baseline).append(w)
    out = []
    for name, (baseline, recent) in sorted(windows.items()):
        enough = len(baseline) >= rule.min_jobs and len(recent) >= rule.min_jobs
        for i, stage in enumerate(STAGES):
            before = quantile([w.stages[i] for w in baseline], 0.95)
            after = quantile([w.stages[i] for w in recent], 0.95)
            grown = (
                after >= before * (1 + rule.min_growth_pct / 100)
                and after - before >= rule.min_increase
            )
            out.append(
                StageRegression(
                    name, stage, before, after, len(baseline), len(recent), enough and grown
                )
            )
    return out


class RecentWaits:
    """Recent waits per runner type: the last ``keep`` summarised for ``explain`` and the
    page, and those that started within ``window`` seconds of the newest (at most
    ``most`` a type) for :func:`stage_regressions`."""

    def __init__(self, keep: int = 500, window: float = 0.0, most: int = 20_000) -> None:
        self.keep = keep
        self.window = window
        self._waits: dict[str, deque[JobWait]] = {}
        self._most = max(keep, most)

    def add(self, waits: Sequence[JobWait]) -> None:
        for w in waits:
            kept = self._waits.setdefault(w.runner_type, deque(maxlen=self._most))
            kept.append(w)
            newest = w.started_at
            if newest is None:
                continue
            cutoff = newest - timedelta(seconds=self.window)
            while len(kept) > self.keep and (kept[0].started_at or newest) < cutoff:
                kept.popleft()

    def all(self) -> list[JobWait]:
        """Every wait kept, oldest first per type."""
        return [w for waits in self._waits.values() for w in waits]

    def summary(self) -> dict[str, StageSummary]:
        out = {}
        for name, kept in sorted(self._waits.items()):
            waits = list(kept)[-self.keep :]
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
