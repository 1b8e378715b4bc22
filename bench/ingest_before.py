"""The SQLite job index as it was before group commit and the index kept in memory, kept
as the baseline of ``bench/ingest.py`` (nothing in ``autoscaler`` uses it):
:class:`BeforeStore` has a rollback journal, decides and writes each delivery's row in a
transaction of its own (one fsync each, three with the journal), and reads the index by
deleting the expired rows (a scan: no index on the expiry) and selecting every row, at
every tick (its ``job_index_changes`` always says "read whole", so the webhook source
reads it whole every tick as it did).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence

from autoscaler.errors import StateError
from autoscaler.observe.github.webhook_rows import (
    Changes,
    IndexRow,
    Outcome,
    decide,
    poll_may_write,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS job_index (
    job_id INTEGER PRIMARY KEY,
    rank INTEGER NOT NULL,
    data TEXT NOT NULL,
    received_at REAL NOT NULL,
    via TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""


class BeforeStore:
    """The job index's part of the SQLite store as it was (one process, one connection)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("PRAGMA locking_mode = EXCLUSIVE")
        self._db.executescript("BEGIN EXCLUSIVE;\n" + _SCHEMA + "COMMIT;\n")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _row(self, job_id: int) -> IndexRow | None:
        row = self._db.execute(
            "SELECT job_id, rank, data, received_at, via FROM job_index WHERE job_id = ?",
            (job_id,),
        ).fetchone()
        return None if row is None else IndexRow(int(row[0]), int(row[1]), row[2], row[3], row[4])

    def _put(self, row: IndexRow) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO job_index VALUES (?, ?, ?, ?, ?, ?)",
            (row.job_id, row.rank, row.data, row.received_at, row.via, row.expires_at),
        )

    def record_job_events(self, rows: Sequence[IndexRow]) -> list[Outcome | StateError]:
        """Each row in a transaction of its own, as ``record_job_event`` wrote one."""
        out: list[Outcome | StateError] = []
        for row in rows:
            with self._lock, self._db:
                outcome = decide(self._row(row.job_id), row)
                if outcome is Outcome.ACCEPTED:
                    self._put(row)
            out.append(outcome)
        return out

    def load_job_index(self, now: float) -> list[IndexRow]:
        with self._lock:
            with self._db:
                self._db.execute("DELETE FROM job_index WHERE expires_at < ?", (now,))
            rows = self._db.execute(
                "SELECT job_id, rank, data, received_at, via FROM job_index ORDER BY job_id"
            ).fetchall()
        return [IndexRow(int(i), int(r), d, t, v) for i, r, d, t, v in rows]

    def job_index_changes(self, cursor: object | None) -> Changes:
        return Changes((), 0, complete=cursor is None)  # read whole, every tick

    def prune_job_index(self, now: float) -> None:
        """Pruned by every read instead."""

    def reconcile_job_index(self, put: Sequence[IndexRow], drop: Sequence[IndexRow]) -> None:
        with self._lock, self._db:
            for row in put:
                if poll_may_write(self._row(row.job_id), row):
                    self._put(row)
            self._db.executemany(
                "DELETE FROM job_index WHERE job_id = ? AND rank = ? AND data = ?",
                [(r.job_id, r.rank, r.data) for r in drop],
            )

    def job_index_version(self) -> str | None:
        return None
