"""Jobs that started, each counted once, and queue-time objectives over windows (pure).

Each poll lists jobs that started (in progress, or completed in a run still in progress)
again and again while they run. :class:`StartTracker` counts each job once: it remembers
the ids it counted with their start time and forgets them once that start is older than
``horizon`` (a job first seen later than that is not counted). Memory is therefore the
jobs started within ``horizon``, not every job ever seen. The first observation only
learns what already started (those jobs started before the controller watched; a
restarted controller would count them twice otherwise).

For runner types with a queue-time objective (``slo: {queue_time, objective}``) it keeps
per-minute counts of jobs started within ``queue_time`` and of all jobs started, for the
windows of multi-window burn-rate alerting (5m, 30m, 1h, 6h): ``burn`` is the share of
jobs that waited too long divided by the error budget ``1 - objective``; 1 spends the
budget exactly over the objective's period, 14.4 spends 2% of a 30-day budget in an hour.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from autoscaler.domain import Job, JobStart, JobStatus
from autoscaler.observe.queue import match_job, queue_time_seconds

if TYPE_CHECKING:
    from autoscaler.config import Config, QueueObjective

#: Burn-rate windows in seconds: (long, short) pairs and the rate both must exceed.
FAST_BURN = (3600.0, 300.0, 14.4)
SLOW_BURN = (21600.0, 1800.0, 6.0)
WINDOWS = (300.0, 1800.0, 3600.0, 21600.0)


@dataclass(frozen=True)
class ObjectiveStatus:
    """A runner type's queue-time objective over the burn-rate windows."""

    runner_type: str
    objective: QueueObjective
    counts: Mapping[float, tuple[int, int]]
    """Window seconds -> (jobs started within queue_time, jobs started)."""

    def share(self, window: float) -> float | None:
        """Share of the window's jobs that started within queue_time (None: no jobs)."""
        good, total = self.counts.get(window, (0, 0))
        return good / total if total else None

    def burn(self, window: float) -> float:
        """How fast the window spends the error budget (0 with no jobs)."""
        share = self.share(window)
        if share is None:
            return 0.0
        return (1.0 - share) / self.objective.error_budget

    @property
    def burning(self) -> bool:
        """Fast (1h and 5m above 14.4) or slow (6h and 30m above 6) burn."""
        return any(
            self.burn(long) > rate and self.burn(short) > rate
            for long, short, rate in (FAST_BURN, SLOW_BURN)
        )


class StartTracker:
    """Counts job starts once per job; per-minute objective counts for slo types."""

    def __init__(
        self, config: Config, *, horizon: float = WINDOWS[-1], bucket: float = 60.0
    ) -> None:
        self.types = tuple(rt.runner_type for rt in config.runner_types)
        self.objectives = {rt.name: rt.slo for rt in config.runner_types if rt.slo is not None}
        self.horizon = timedelta(seconds=max(horizon, WINDOWS[-1]))
        self.bucket = bucket
        self._seen: dict[int, datetime] = {}
        #: Queued job id -> when we first saw it queued (for where its wait went).
        self._queued: dict[int, datetime] = {}
        self._first = True
        #: Runner type -> (bucket index, good, total), oldest first.
        self._buckets: dict[str, deque[list[int]]] = {name: deque() for name in self.objectives}

    def __len__(self) -> int:
        """Job ids remembered (bounded by the jobs started within ``horizon``)."""
        return len(self._seen)

    def observe(self, jobs: Iterable[Job], now: datetime) -> list[JobStart]:
        """The jobs that started since the last observation (each job once)."""
        cutoff = now - self.horizon
        self._seen = {i: at for i, at in self._seen.items() if at >= cutoff}
        self._queued = {i: at for i, at in self._queued.items() if at >= cutoff}
        out: list[JobStart] = []
        for job in jobs:
            if job.status is JobStatus.QUEUED:
                self._queued.setdefault(job.id, now)
                continue
            if job.started_at is None:
                continue
            if job.id in self._seen or job.started_at < cutoff:
                continue
            self._seen[job.id] = job.started_at
            first_seen = self._queued.pop(job.id, None)
            rtype = match_job(job.labels, self.types)
            if self._first or rtype is None:
                continue
            seconds = queue_time_seconds(job, now)
            slo = self.objectives.get(rtype.name)
            within = None if slo is None else seconds <= slo.queue_time
            out.append(
                JobStart(
                    rtype.name,
                    seconds,
                    within,
                    created_at=job.created_at,
                    started_at=job.started_at,
                    first_seen=first_seen,
                    runner_name=job.runner_name,
                    repository=job.repo,
                    job_id=job.id,
                )
            )
        self._first = False
        self._count(out, now)
        return out

    def _count(self, starts: Sequence[JobStart], now: datetime) -> None:
        index = int(now.timestamp() // self.bucket)
        keep = int(self.horizon.total_seconds() // self.bucket) + 1
        for name, buckets in self._buckets.items():
            if not buckets or buckets[-1][0] != index:
                buckets.append([index, 0, 0])
            while buckets and buckets[0][0] <= index - keep:
                buckets.popleft()
            for s in starts:
                if s.runner_type == name:
                    buckets[-1][1] += int(bool(s.within_objective))
                    buckets[-1][2] += 1

    def status(self, now: datetime) -> dict[str, ObjectiveStatus]:
        """Each slo type's objective over :data:`WINDOWS`, as of ``now``."""
        index = int(now.timestamp() // self.bucket)
        out = {}
        for name, slo in self.objectives.items():
            counts = {}
            for window in WINDOWS:
                first = index - int(window // self.bucket) + 1
                rows = [b for b in self._buckets[name] if b[0] >= first]
                counts[window] = (sum(b[1] for b in rows), sum(b[2] for b in rows))
            out[name] = ObjectiveStatus(name, slo, counts)
        return out
