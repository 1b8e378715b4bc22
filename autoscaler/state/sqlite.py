"""SQLite state store (the embedded default backend of :mod:`autoscaler.state.port`): alert
states, the outbox of undelivered notifications, the GitHub issue numbers the
``github_issue`` receiver keeps, the GitHub poll's ETag cache, and the scaler's memory of
capacity back-offs, last scale-ups, refused launches and pending terminations. All of it
survives a restart, so a new process neither pages again for a firing alert nor forgets to
resolve it, does not hammer a pool that was out of capacity, terminates what it had
deregistered, and its first poll of GitHub is mostly 304s.

``path`` ``None`` or ``":memory:"`` keeps everything in memory.

- **One controller per file.** The file is opened in SQLite's exclusive locking mode and
  locked at open, for the life of the process: a second controller on the same file
  cannot use it (:class:`StateLockedError` after ``lock_timeout``, saying that another
  controller runs), instead of both paging for every transition.
- **Opened lazily, reopened after a failure.** The constructor touches no file; every
  operation opens it if needed. After an error the connection is dropped, so fixing the
  file (moving a corrupt one aside, making it writable, stopping the other controller)
  takes effect at the next tick without a restart.
- **Errors are translated at this edge** (:mod:`autoscaler.state.sqlite_errors`): a
  corrupt, truncated, locked, read-only or unreachable file raises a
  :class:`StateError` whose message names the file and what to do; never a sqlite3
  traceback.

Thread-safe: one lock serialises every use (the tick and the delivery workers share it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from autoscaler.alerting.evaluation import Evaluation
from autoscaler.alerting.lifecycle import AlertState, AlertStatus, Notification
from autoscaler.alerting.store import OutboxItem
from autoscaler.config import StateConfig
from autoscaler.errors import StateError, StateUnusableError
from autoscaler.observe.github.webhook_rows import (
    Changes,
    IndexRow,
    Outcome,
    decide,
    poll_may_write,
)
from autoscaler.scale.memory import PoolMemory
from autoscaler.state.job_feed import FeedCursor, JobFeed
from autoscaler.state.sqlite_errors import translate

MEMORY = ":memory:"

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
CREATE TABLE IF NOT EXISTS job_retries (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS issues (
    receiver TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    number INTEGER NOT NULL,
    PRIMARY KEY (receiver, fingerprint)
);
CREATE TABLE IF NOT EXISTS pools (
    pool TEXT PRIMARY KEY,
    memory TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jit_records (
    instance_id TEXT PRIMARY KEY,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS job_index (
    job_id INTEGER PRIMARY KEY,
    rank INTEGER NOT NULL,
    data TEXT NOT NULL,
    received_at REAL NOT NULL,
    via TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS job_index_expiry ON job_index (expires_at);
"""


F = TypeVar("F", bound=Callable[..., Any])


def _operation(name: str) -> Callable[[F], F]:
    """Run a store method under the lock with an open connection (``self._db``); translate
    what SQLite raises into a StateError and drop the connection, so the next call reopens."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: SqliteStore, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self._open()
                try:
                    return fn(self, *args, **kwargs)
                except (sqlite3.Error, OSError) as exc:
                    self._drop()
                    raise translate(exc, self.path, name) from exc

        return wrapper  # type: ignore[return-value]

    return decorate


def _ts(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def _dt(s: str | None) -> datetime | None:
    return None if s is None else datetime.fromisoformat(s)


class SqliteStore:
    """:class:`autoscaler.state.port.StateStore` in one SQLite file."""

    def __init__(self, path: str | Path | None = None, *, lock_timeout: float = 1.0) -> None:
        #: The state file (``":memory:"`` for none), as messages name it.
        self.path = MEMORY if path is None else str(path)
        self.lock_timeout = lock_timeout
        # The tick and the delivery workers share one connection; a lock serialises every
        # use instead of sqlite's same-thread check.
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        #: The event rows accepted, for the readers of ``job_index_changes``.
        self._feed = JobFeed()
        if self.path == MEMORY:
            self._open()  # nothing can fail, and a memory database lives in its connection

    @classmethod
    def from_config(cls, config: StateConfig) -> SqliteStore:
        return cls(config.path)

    @property
    def _db(self) -> sqlite3.Connection:
        assert self._conn is not None, "used outside _operation"
        return self._conn

    def _open(self) -> None:
        if self._conn is not None:
            return
        if self._closed:
            raise StateUnusableError(
                f"state file {self.path} is closed (the controller is stopping)",
                path=self.path,
                code="closed",
                operation="open",
            )
        conn: sqlite3.Connection | None = None
        try:
            if self.path != MEMORY:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # A lock held by another controller is held for its lifetime: waiting long
            # helps nothing, so the busy timeout is short.
            conn = sqlite3.connect(self.path, timeout=self.lock_timeout, check_same_thread=False)
            # Exclusive locking mode keeps every lock taken until the connection closes;
            # BEGIN EXCLUSIVE takes the write lock now. Another controller on this file
            # fails here, instead of both sending every notification.
            conn.execute("PRAGMA locking_mode = EXCLUSIVE")
            # Write-ahead log, synced at every commit: a commit is one append and one
            # fsync of the log (the rollback journal took three), and what it answers
            # for is on disk when it returns, power loss included.
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.executescript("BEGIN EXCLUSIVE;\n" + _SCHEMA + "COMMIT;\n")
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                conn.close()
            raise translate(exc, self.path, "open") from exc
        self._conn = conn

    def _drop(self) -> None:
        """Forget a connection that failed (a memory database is kept: it is the data)."""
        if self._conn is not None and self.path != MEMORY:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Release the file (and its lock). Later calls raise a StateError (code ``closed``)."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()
                self._conn = None

    # --- alert states
    @_operation("load_states")
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

    @_operation("save")
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
    @_operation("pending")
    def pending(self, receiver: str | None = None) -> list[OutboxItem]:
        """Undelivered notifications, oldest first."""
        sql = "SELECT id, receiver, notification, attempts, last_error FROM outbox"
        args: tuple[str, ...] = ()
        if receiver is not None:
            sql += " WHERE receiver = ?"
            args = (receiver,)
        rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        return [
            OutboxItem(str(i), r, Notification.from_dict(json.loads(n)), a, e)
            for i, r, n, a, e in rows
        ]

    @_operation("mark_delivered")
    def mark_delivered(self, item_id: str) -> None:
        with self._db:
            self._db.execute("DELETE FROM outbox WHERE id = ?", (int(item_id),))

    @_operation("mark_failed")
    def mark_failed(self, item_id: str, error: str) -> None:
        with self._db:
            self._db.execute(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                (error[:500], int(item_id)),
            )

    # --- github issue numbers
    @_operation("issue_number")
    def issue_number(self, receiver: str, fingerprint: str) -> int | None:
        row = self._db.execute(
            "SELECT number FROM issues WHERE receiver = ? AND fingerprint = ?",
            (receiver, fingerprint),
        ).fetchone()
        return None if row is None else int(row[0])

    @_operation("set_issue_number")
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
    @_operation("load_poll_cache")
    def load_poll_cache(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM poll_cache").fetchall())

    @_operation("save_poll_cache")
    def save_poll_cache(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        with self._db:
            self._db.executemany("DELETE FROM poll_cache WHERE key = ?", [(k,) for k in drop])
            self._db.executemany(
                "INSERT OR REPLACE INTO poll_cache (key, value) VALUES (?, ?)", list(put.items())
            )

    # --- the scaler's memory (ScalingMemoryStore)
    @_operation("load_pools")
    def load_pools(self) -> dict[str, PoolMemory]:
        rows = self._db.execute("SELECT pool, memory FROM pools").fetchall()
        return {pool: PoolMemory.from_dict(pool, json.loads(m)) for pool, m in rows}

    @_operation("save_pools")
    def save_pools(self, put: Mapping[str, PoolMemory], drop: Collection[str]) -> None:
        with self._db:
            self._db.executemany("DELETE FROM pools WHERE pool = ?", [(p,) for p in drop])
            self._db.executemany(
                "INSERT OR REPLACE INTO pools (pool, memory) VALUES (?, ?)",
                [(p, json.dumps(m.to_dict())) for p, m in put.items()],
            )

    # --- the handover ledger (autoscaler.scale.handover.HandoverStore)
    @_operation("load_jit_records")
    def load_jit_records(self) -> dict[str, str]:
        """Instance id -> its JIT record (JSON written by the scaler), saved before GitHub
        is asked, so a restart never asks twice for one instance."""
        return dict(self._db.execute("SELECT instance_id, record FROM jit_records").fetchall())

    @_operation("save_jit_records")
    def save_jit_records(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        with self._db:
            self._db.executemany(
                "DELETE FROM jit_records WHERE instance_id = ?", [(k,) for k in drop]
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO jit_records (instance_id, record) VALUES (?, ?)",
                list(put.items()),
            )

    # --- the job-retry ledger (autoscaler.job_retry.ledger.JobRetryStore)
    @_operation("load_job_retries")
    def load_job_retries(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM job_retries").fetchall())

    @_operation("save_job_retries")
    def save_job_retries(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        with self._db:
            self._db.executemany("DELETE FROM job_retries WHERE key = ?", [(k,) for k in drop])
            self._db.executemany(
                "INSERT OR REPLACE INTO job_retries (key, value) VALUES (?, ?)", list(put.items())
            )

    # --- the webhook job index (autoscaler.observe.github.webhook_rows.JobIndexStore)
    # One process per file: the lock makes each read-decide-write atomic, which is all the
    # ordering rules need here (DynamoDB, shared by replicas, puts them in its conditions).
    def _job_row(self, job_id: int) -> IndexRow | None:
        row = self._db.execute(
            "SELECT job_id, rank, data, received_at, via FROM job_index WHERE job_id = ?",
            (job_id,),
        ).fetchone()
        return None if row is None else IndexRow(int(row[0]), int(row[1]), row[2], row[3], row[4])

    def _put_job_row(self, row: IndexRow) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO job_index VALUES (?, ?, ?, ?, ?, ?)",
            (row.job_id, row.rank, row.data, row.received_at, row.via, row.expires_at),
        )

    @_operation("record_job_events")
    def record_job_events(self, rows: Sequence[IndexRow]) -> list[Outcome | StateError]:
        """One transaction, one fsync, however many rows: each decided against the stored
        row or the batch's earlier row of the same job. Three calls into SQLite a batch,
        not two a row: each call gives up the interpreter lock and must win it back from
        the listener's busy event loop."""
        # One parameter, a JSON list of the ids: no SQL built from strings, no cap on the
        # number of variables a statement takes.
        found = self._db.execute(
            "SELECT job_id, rank, data, received_at, via FROM job_index "
            "WHERE job_id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted({row.job_id for row in rows})),),
        ).fetchall()
        current = {int(i): IndexRow(int(i), int(r), d, t, v) for i, r, d, t, v in found}
        outcomes: list[Outcome | StateError] = []
        accepted: list[IndexRow] = []
        for row in rows:
            outcome = decide(current.get(row.job_id), row)
            if outcome is Outcome.ACCEPTED:
                current[row.job_id] = row
                accepted.append(row)
            outcomes.append(outcome)
        if accepted:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO job_index VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (r.job_id, r.rank, r.data, r.received_at, r.via, r.expires_at)
                        for r in accepted
                    ],
                )
            self._feed.append(accepted)
        return outcomes

    @_operation("load_job_index")
    def load_job_index(self, now: float) -> list[IndexRow]:
        rows = self._db.execute(
            "SELECT job_id, rank, data, received_at, via FROM job_index WHERE expires_at >= ? "
            "ORDER BY job_id",
            (now,),
        ).fetchall()
        return [IndexRow(int(i), int(r), d, t, v) for i, r, d, t, v in rows]

    def job_index_changes(self, cursor: object | None) -> Changes:
        """From this store's feed: one process per file, so every row was written here."""
        if not isinstance(cursor, FeedCursor):
            return Changes((), self._feed.open())
        rows, complete = self._feed.read(cursor)
        return Changes(tuple(rows), cursor, complete)

    @_operation("prune_job_index")
    def prune_job_index(self, now: float) -> None:
        """The expired rows go (found by their expiry index: as cheap as what expired)."""
        with self._db:
            self._db.execute("DELETE FROM job_index WHERE expires_at < ?", (now,))

    @_operation("reconcile_job_index")
    def reconcile_job_index(self, put: Sequence[IndexRow], drop: Sequence[IndexRow]) -> None:
        with self._db:
            for row in put:
                if poll_may_write(self._job_row(row.job_id), row):
                    self._put_job_row(row)
            self._db.executemany(
                "DELETE FROM job_index WHERE job_id = ? AND rank = ? AND data = ?",
                [(r.job_id, r.rank, r.data) for r in drop],
            )

    def job_index_version(self) -> str | None:
        return None  # one process per file: its own receiver wakes its own tick
