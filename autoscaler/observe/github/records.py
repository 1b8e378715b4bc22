"""Pages parsed once into compact records, and their JSON form for the state store.

A GitHub page is parsed when it arrives (200) and only the record is kept: the repository
names, run references, jobs or runners it holds, its ``total_count`` and how many items
were skipped as malformed (so a 304 later counts them again, and a runner skipped on a
cached page still blocks orphan cleanup). No page body is ever kept: 50,000 queued jobs
are ~50,000 small frozen values whose label sets are shared.

The JSON form is versioned by its ``v`` field; a record that does not decode is dropped
(the next request for its URL is simply unconditional).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from autoscaler.domain import Job, JobStatus, Runner

#: The kinds of record, one per listing endpoint.
KINDS = ("repos", "runs", "jobs", "runners")
_VERSION = 1


@dataclass(frozen=True, slots=True)
class RunRef:
    """A workflow run as a runs listing shows it: enough to list its jobs and narrow."""

    id: int
    repo: str
    completed: bool
    created_at: float = 0.0
    """Unix time; the oldest run of a capped listing is where the next ``created`` range ends."""
    status: str = ""
    """The status GitHub reports for it (``queued``, ``in_progress``, ``completed``...)."""


@dataclass(frozen=True, slots=True)
class PageRecord:
    """What one page held, compactly."""

    kind: str
    items: tuple[Any, ...]
    """``str`` (repos), :class:`RunRef` (runs), :class:`Job` (jobs), ``Runner`` (runners)."""
    total_count: int | None = None
    skips: tuple[tuple[str, int], ...] = ()
    """(kind, count) of the items skipped as malformed on this page."""


class Interner:
    """Shares equal label sets and strings between records (most jobs share a few)."""

    def __init__(self) -> None:
        self._labels: dict[frozenset[str], frozenset[str]] = {}

    def labels(self, labels: frozenset[str]) -> frozenset[str]:
        return self._labels.setdefault(labels, labels)

    @staticmethod
    def text(value: str) -> str:
        return sys.intern(value)


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _dt(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def _encode_item(kind: str, item: Any) -> Any:
    if kind == "repos":
        return item
    if kind == "runs":
        return [item.id, item.repo, item.completed, item.created_at, item.status]
    if kind == "jobs":
        return [
            item.id,
            item.run_id,
            item.repo,
            item.name,
            sorted(item.labels),
            item.status.value,
            _ts(item.created_at),
            _ts(item.started_at),
            item.has_steps,
            item.runner_name,
        ]
    return [item.id, item.name, sorted(item.labels), item.online, item.busy]


def _decode_item(kind: str, raw: Any, interner: Interner) -> Any:
    if kind == "repos":
        return interner.text(str(raw))
    if kind == "runs":
        run_id, repo, completed, created, *status = raw  # no status: a record from before
        text = interner.text(str(status[0])) if status else ""
        return RunRef(int(run_id), interner.text(repo), bool(completed), float(created), text)
    if kind == "jobs":
        job_id, run_id, repo, name, labels, status, created, started, steps, runner = raw
        created_at = _dt(created)
        if created_at is None:
            raise ValueError("a job without created_at")
        return Job(
            id=int(job_id),
            run_id=int(run_id),
            repo=interner.text(repo),
            name=interner.text(name),
            labels=interner.labels(frozenset(labels)),
            status=JobStatus(status),
            created_at=created_at,
            started_at=_dt(started),
            has_steps=bool(steps),
            runner_name=runner,
        )
    runner_id, name, labels, online, busy = raw
    return Runner(int(runner_id), name, interner.labels(frozenset(labels)), online, busy)


def encode(record: PageRecord, etag: str, link: str | None) -> str:
    """One cache entry as a JSON string (for the state store)."""
    return json.dumps(
        {
            "v": _VERSION,
            "kind": record.kind,
            "etag": etag,
            "link": link,
            "total": record.total_count,
            "skips": [list(s) for s in record.skips],
            "items": [_encode_item(record.kind, item) for item in record.items],
        },
        separators=(",", ":"),
    )


def decode(text: str, interner: Interner) -> tuple[PageRecord, str, str | None]:
    """(record, etag, link) from :func:`encode`'s output. Raises ValueError when it is not."""
    try:
        raw = json.loads(text)
        if raw.get("v") != _VERSION or raw.get("kind") not in KINDS:
            raise ValueError("unknown record version or kind")
        kind = raw["kind"]
        record = PageRecord(
            kind,
            tuple(_decode_item(kind, item, interner) for item in raw["items"]),
            None if raw["total"] is None else int(raw["total"]),
            tuple((str(k), int(n)) for k, n in raw["skips"]),
        )
        return record, str(raw["etag"]), raw["link"]
    except (KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(f"not a cache record ({type(exc).__name__})") from None


def skip_counts(records: Iterable[PageRecord]) -> dict[str, int]:
    """Skipped items per kind over several pages."""
    out: dict[str, int] = {}
    for record in records:
        for kind, count in record.skips:
            out[kind] = out.get(kind, 0) + count
    return out
