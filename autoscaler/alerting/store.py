"""SQLite state store: alert states, the outbox of undelivered notifications, the
GitHub issue numbers the ``github_issue`` receiver keeps, and the GitHub poll's ETag cache
(the :class:`~autoscaler.observe.github.cache.PollCacheStore` port). All of it survives a
restart, so a new process neither pages again for a firing alert nor forgets to resolve
it, and its first poll of GitHub is mostly 304s.

Use from one thread (the controller's tick). ``path`` ``None`` or ``":memory:"`` keeps
everything in memory.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from autoscaler.alerting.lifecycle import AlertState, AlertStatus, Notification
from autoscaler.alerting.rules import Evaluation
from autoscaler.config import StateConfig

_SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    fingerprint TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    since TEXT NOT NULL,
    fired_at TEXT,
    last_notified TEXT,
    evaluation TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    receiver TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    notification TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);
CREATE TABLE IF NOT EXISTS poll_cache (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS issues (
    receiver TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    number INTEGER NOT NULL,
    PRIMARY KEY (receiver, fingerprint)
);
"""


@dataclass(frozen=True)
class OutboxItem:
    """One notification still owed to one receiver."""

    id: int
    receiver: str
    notification: Notification
    attempts: int = 0
    last_error: str | None = None


F = TypeVar("F", bound=Callable[..., Any])


def _locked(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(self: StateStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return fn(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _ts(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def _dt(s: str | None) -> datetime | None:
    return None if s is None else datetime.fromisoformat(s)


class StateStore:
    def __init__(self, path: str | Path | None = None) -> None:
        target = ":memory:" if path is None else str(path)
        if target != ":memory:":
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        # The controller may build the store on one thread and tick on another; a lock
        # serialises every use instead of sqlite's same-thread check.
        self._db = sqlite3.connect(target, check_same_thread=False)
        self._lock = threading.RLock()
        self._db.executescript(_SCHEMA)
        self._db.commit()

    @classmethod
    def from_config(cls, config: StateConfig) -> StateStore:
        return cls(config.path)

    @_locked
    def close(self) -> None:
        self._db.close()

    # --- alert states
    @_locked
    def load_states(self) -> dict[str, AlertState]:
        rows = self._db.execute(
            "SELECT fingerprint, status, since, fired_at, last_notified, evaluation FROM alerts"
        ).fetchall()
        out: dict[str, AlertState] = {}
        for fp, status, since, fired, notified, ev in rows:
            out[fp] = AlertState(
                status=AlertStatus(status),
                evaluation=Evaluation.from_dict(json.loads(ev)),
                since=datetime.fromisoformat(since),
                fired_at=_dt(fired),
                last_notified=_dt(notified),
            )
        return out

    @_locked
    def save(
        self, states: Mapping[str, AlertState], outbox: Sequence[tuple[str, Notification]] = ()
    ) -> None:
        """Replace every alert state and append to the outbox, in one transaction."""
        with self._db:
            self._db.execute("DELETE FROM alerts")
            self._db.executemany(
                "INSERT INTO alerts VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        fp,
                        s.status.value,
                        _ts(s.since),
                        _ts(s.fired_at),
                        _ts(s.last_notified),
                        json.dumps(s.evaluation.to_dict()),
                    )
                    for fp, s in states.items()
                ],
            )
            self._db.executemany(
                "INSERT INTO outbox (receiver, fingerprint, notification) VALUES (?, ?, ?)",
                [(r, n.fingerprint, json.dumps(n.to_dict())) for r, n in outbox],
            )

    # --- outbox
    @_locked
    def pending(self, receiver: str | None = None) -> list[OutboxItem]:
        """Undelivered notifications, oldest first."""
        sql = "SELECT id, receiver, notification, attempts, last_error FROM outbox"
        args: tuple[str, ...] = ()
        if receiver is not None:
            sql += " WHERE receiver = ?"
            args = (receiver,)
        rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        return [
            OutboxItem(i, r, Notification.from_dict(json.loads(n)), a, e) for i, r, n, a, e in rows
        ]

    @_locked
    def mark_delivered(self, item_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM outbox WHERE id = ?", (item_id,))

    @_locked
    def mark_failed(self, item_id: int, error: str) -> None:
        with self._db:
            self._db.execute(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                (error[:500], item_id),
            )

    # --- github issue numbers
    @_locked
    def issue_number(self, receiver: str, fingerprint: str) -> int | None:
        row = self._db.execute(
            "SELECT number FROM issues WHERE receiver = ? AND fingerprint = ?",
            (receiver, fingerprint),
        ).fetchone()
        return None if row is None else int(row[0])

    @_locked
    def set_issue_number(self, receiver: str, fingerprint: str, number: int | None) -> None:
        with self._db:
            if number is None:
                self._db.execute(
                    "DELETE FROM issues WHERE receiver = ? AND fingerprint = ?",
                    (receiver, fingerprint),
                )
            else:
                self._db.execute(
                    "INSERT OR REPLACE INTO issues VALUES (?, ?, ?)",
                    (receiver, fingerprint, number),
                )

    # --- the GitHub poll's ETag cache (PollCacheStore)
    @_locked
    def load_poll_cache(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM poll_cache").fetchall())

    @_locked
    def save_poll_cache(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        with self._db:
            self._db.executemany("DELETE FROM poll_cache WHERE key = ?", [(k,) for k in drop])
            self._db.executemany(
                "INSERT OR REPLACE INTO poll_cache (key, value) VALUES (?, ?)", list(put.items())
            )
