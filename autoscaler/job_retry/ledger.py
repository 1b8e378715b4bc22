"""What was re-run, what ran out of attempts, which repositories refused (pure values).

The ledger is what makes re-runs idempotent across ticks, restarts and a change of leader:
a run attempt (``repo#run_id#attempt``) is asked to re-run at most once, ever (while its
record is kept, :data:`RETENTION`; GitHub re-runs only within 30 days). The record is
written before the request goes out (``asked`` false) and completed once GitHub answered:
a controller that finds a record never completed (its writer died, or the answer was lost)
reads the run before it asks again, so no path asks twice.

It persists through the narrow :class:`JobRetryStore` port, a bounded string mapping like
the poll's ETag cache, so any state backend (SQLite, DynamoDB) holds it with two calls;
:func:`encode` and :func:`diff` give it exactly the entries that changed. Entries of the
earlier per-job shape (``rerun:repo#job_id``) are read as their run attempt's and
replaced on the next save.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from autoscaler.domain import run_key

log = logging.getLogger(__name__)

#: Records are kept this long (then a run attempt could be asked again; none will be).
RETENTION = timedelta(days=3)
#: After a 403 the repository is left alone this long; then one re-run may probe again.
#: The denial itself is remembered until a re-run there goes through (or for RETENTION):
#: its alert stays one page across the probes that fail.
DENIED_PAUSE = timedelta(hours=6)
#: An exhausted run's alert fires this long, then resolves (it is a notification).
ALERT_WINDOW = timedelta(hours=1)


@runtime_checkable
class JobRetryStore(Protocol):
    """Where the ledger survives a restart: a bounded mapping of string to string."""

    def load_job_retries(self) -> dict[str, str]:
        """Every stored entry (key -> value)."""
        ...

    def save_job_retries(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        """Store ``put`` (insert or replace) and delete ``drop``, in one transaction."""
        ...


@dataclass(frozen=True, slots=True)
class Rerun:
    """A run attempt this controller asked GitHub to re-run (or GitHub said was already)."""

    repo: str
    run_id: int
    attempt: int
    at: datetime
    reason: str
    """The first lost job's reason (``spot_interruption``, ``runner_lost``, ...)."""
    jobs: tuple[int, ...] = ()
    """The lost and the cancelled-by-the-loss jobs' ids."""
    asked: bool = True
    """False: written before the request; GitHub's answer is not recorded (yet)."""

    @property
    def key(self) -> str:
        return run_key(self.repo, self.run_id, self.attempt)


@dataclass(frozen=True, slots=True)
class Exhausted:
    """A run lost to infrastructure again after its attempts: on-call is told once. The
    job fields name its first lost job."""

    repo: str
    run_id: int
    job_id: int
    job_name: str
    runner: str
    attempt: int
    reason: str
    evidence: str
    at: datetime
    lost_jobs: int = 1
    """How many jobs of the run attempt were lost."""

    @property
    def key(self) -> str:
        return run_key(self.repo, self.run_id, self.attempt)


@dataclass(frozen=True)
class Ledger:
    reruns: Mapping[str, Rerun] = field(default_factory=dict)
    """Run attempt key (``repo#run_id#attempt``) -> its re-run."""
    exhausted: Mapping[str, Exhausted] = field(default_factory=dict)
    """Run attempt key -> why it was not re-run again."""
    denied: Mapping[str, datetime] = field(default_factory=dict)
    """Repository -> when GitHub last answered a re-run with 403 (no permission); kept
    until a re-run there goes through, for at most :data:`RETENTION`."""

    def reruns_since(self, since: datetime) -> int:
        return sum(1 for r in self.reruns.values() if r.at > since)

    def is_denied(self, repo: str, now: datetime) -> bool:
        at = self.denied.get(repo)
        return at is not None and now - at < DENIED_PAUSE

    def alerting(self, now: datetime) -> tuple[Exhausted, ...]:
        """Exhausted runs whose alert still fires, oldest first."""
        return tuple(
            sorted(
                (e for e in self.exhausted.values() if now - e.at < ALERT_WINDOW),
                key=lambda e: (e.at, e.repo, e.run_id, e.attempt),
            )
        )

    def pruned(self, now: datetime) -> Ledger:
        return replace(
            self,
            reruns={k: r for k, r in self.reruns.items() if now - r.at < RETENTION},
            exhausted={k: e for k, e in self.exhausted.items() if now - e.at < RETENTION},
            denied={k: t for k, t in self.denied.items() if now - t < RETENTION},
        )


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    return value


def encode(ledger: Ledger) -> dict[str, str]:
    """The ledger as store entries: ``rerun:KEY``, ``exhausted:KEY``, ``denied:REPO``."""
    out: dict[str, str] = {}
    for key, r in ledger.reruns.items():
        out[f"rerun:{key}"] = json.dumps({k: _json(v) for k, v in asdict(r).items()})
    for key, e in ledger.exhausted.items():
        out[f"exhausted:{key}"] = json.dumps({k: _json(v) for k, v in asdict(e).items()})
    for repo, at in ledger.denied.items():
        out[f"denied:{repo}"] = json.dumps({"at": at.isoformat()})
    return out


def _rerun(raw: Mapping[str, Any], at: datetime) -> Rerun:
    jobs = raw.get("jobs")
    if jobs is None:  # the per-job shape: the one job it re-ran
        jobs = [raw["job_id"]] if "job_id" in raw else []
    if not isinstance(jobs, list):
        raise TypeError("jobs: expected a list")
    asked = raw.get("asked", True)
    if not isinstance(asked, bool):
        raise TypeError("asked: expected a boolean")
    return Rerun(
        str(raw["repo"]),
        int(raw["run_id"]),
        int(raw["attempt"]),
        at,
        str(raw["reason"]),
        tuple(int(j) for j in jobs),
        asked,
    )


def _exhausted(raw: Mapping[str, Any], at: datetime) -> Exhausted:
    return Exhausted(
        str(raw["repo"]),
        int(raw["run_id"]),
        int(raw["job_id"]),
        str(raw["job_name"]),
        str(raw["runner"]),
        int(raw["attempt"]),
        str(raw["reason"]),
        str(raw["evidence"]),
        at,
        int(raw.get("lost_jobs", 1)),
    )


def _entry(key: str, text: str) -> Rerun | Exhausted | tuple[str, datetime]:
    """One store entry; raises ValueError, KeyError, TypeError or AttributeError."""
    kind, _, name = key.partition(":")
    raw = json.loads(text)
    at = datetime.fromisoformat(raw["at"])
    if kind == "rerun":
        return _rerun(raw, at)
    if kind == "exhausted":
        return _exhausted(raw, at)
    if kind == "denied":
        return (name, at)
    raise ValueError(f"unknown entry kind {kind!r}")


_UNREADABLE = (ValueError, KeyError, TypeError, AttributeError)


def decode(entries: Mapping[str, str]) -> Ledger:
    """Store entries -> ledger; an entry that does not decode is skipped (and logged).
    Records are keyed by their run attempt, whatever key they were stored under."""
    reruns: dict[str, Rerun] = {}
    exhausted: dict[str, Exhausted] = {}
    denied: dict[str, datetime] = {}
    bad = 0
    for key, text in entries.items():
        try:
            entry = _entry(key, text)
        except _UNREADABLE:
            bad += 1
            continue
        if isinstance(entry, Rerun):
            known = reruns.get(entry.key)
            if known is None or (entry.asked and not known.asked):
                reruns[entry.key] = entry
        elif isinstance(entry, Exhausted):
            exhausted.setdefault(entry.key, entry)
        else:
            denied[entry[0]] = entry[1]
    if bad:
        log.warning("job retry ledger: %d unreadable entries skipped", bad)
    return Ledger(reruns, exhausted, denied)


def _readable(key: str, text: str) -> bool:
    try:
        _entry(key, text)
    except _UNREADABLE:
        return False
    return True


def diff(stored: Mapping[str, str], new: Ledger) -> tuple[dict[str, str], set[str]]:
    """(entries to put, keys to drop) that turn the ``stored`` entries into ``new``. A
    stored entry ``new`` no longer holds is dropped (pruned, or kept under its run
    attempt's key now: the per-job shape); one this version cannot read is left alone."""
    after = encode(new)
    put = {k: v for k, v in after.items() if stored.get(k) != v}
    gone = set(stored) - set(after)
    return put, {k for k in gone if _readable(k, stored[k])}
