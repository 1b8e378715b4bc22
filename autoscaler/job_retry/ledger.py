"""What was re-run, what ran out of attempts, which repositories refused (pure values).

The ledger is what makes re-runs idempotent across ticks, restarts and a change of leader:
a job (one attempt of one job: ``repo#job_id``) is asked to re-run at most once, ever
(while its record is kept, :data:`RETENTION`; GitHub re-runs only within 30 days and the
poll sees a run complete once). It persists through the narrow :class:`JobRetryStore`
port, a bounded string mapping like the poll's ETag cache, so any state backend (SQLite
today, DynamoDB) can hold it with two calls; :func:`encode` and :func:`diff` give it
exactly the entries that changed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger(__name__)

#: Records are kept this long (then a job id could be asked again; none will be).
RETENTION = timedelta(days=3)
#: After a 403 the repository is left alone this long; then one re-run may probe again.
#: The denial itself is remembered until a re-run there goes through (or for RETENTION):
#: its alert stays one page across the probes that fail.
DENIED_PAUSE = timedelta(hours=6)
#: An exhausted job's alert fires this long, then resolves (it is a notification).
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
    """A job this controller asked GitHub to re-run (or GitHub said was already re-run)."""

    repo: str
    run_id: int
    job_id: int
    attempt: int
    at: datetime
    reason: str


@dataclass(frozen=True, slots=True)
class Exhausted:
    """A job lost to infrastructure again after its attempts: on-call is told once."""

    repo: str
    run_id: int
    job_id: int
    job_name: str
    runner: str
    attempt: int
    reason: str
    evidence: str
    at: datetime


@dataclass(frozen=True)
class Ledger:
    reruns: Mapping[str, Rerun] = field(default_factory=dict)
    """Job key (``repo#job_id``) -> its re-run."""
    exhausted: Mapping[str, Exhausted] = field(default_factory=dict)
    """Job key -> why it was not re-run again."""
    denied: Mapping[str, datetime] = field(default_factory=dict)
    """Repository -> when GitHub last answered a re-run with 403 (no permission); kept
    until a re-run there goes through, for at most :data:`RETENTION`."""

    def reruns_since(self, since: datetime) -> int:
        return sum(1 for r in self.reruns.values() if r.at > since)

    def is_denied(self, repo: str, now: datetime) -> bool:
        at = self.denied.get(repo)
        return at is not None and now - at < DENIED_PAUSE

    def alerting(self, now: datetime) -> tuple[Exhausted, ...]:
        """Exhausted jobs whose alert still fires, oldest first."""
        return tuple(
            sorted(
                (e for e in self.exhausted.values() if now - e.at < ALERT_WINDOW),
                key=lambda e: (e.at, e.repo, e.job_id),
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


def decode(entries: Mapping[str, str]) -> Ledger:
    """Store entries -> ledger; an entry that does not decode is skipped (and logged)."""
    reruns: dict[str, Rerun] = {}
    exhausted: dict[str, Exhausted] = {}
    denied: dict[str, datetime] = {}
    bad = 0
    for key, text in entries.items():
        kind, _, name = key.partition(":")
        try:
            raw = json.loads(text)
            at = datetime.fromisoformat(raw["at"])
            if kind == "rerun":
                reruns[name] = Rerun(
                    str(raw["repo"]),
                    int(raw["run_id"]),
                    int(raw["job_id"]),
                    int(raw["attempt"]),
                    at,
                    str(raw["reason"]),
                )
            elif kind == "exhausted":
                exhausted[name] = Exhausted(
                    str(raw["repo"]),
                    int(raw["run_id"]),
                    int(raw["job_id"]),
                    str(raw["job_name"]),
                    str(raw["runner"]),
                    int(raw["attempt"]),
                    str(raw["reason"]),
                    str(raw["evidence"]),
                    at,
                )
            elif kind == "denied":
                denied[name] = at
            else:
                bad += 1
        except (ValueError, KeyError, TypeError, AttributeError):
            bad += 1
    if bad:
        log.warning("job retry ledger: %d unreadable entries skipped", bad)
    return Ledger(reruns, exhausted, denied)


def diff(old: Ledger, new: Ledger) -> tuple[dict[str, str], set[str]]:
    """(entries to put, keys to drop) that turn the stored ``old`` into ``new``."""
    before, after = encode(old), encode(new)
    put = {k: v for k, v in after.items() if before.get(k) != v}
    return put, set(before) - set(after)
