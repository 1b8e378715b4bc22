"""The webhook job index in the DynamoDB state table: the partition ``job#<shard>``, one item
per job id (sort key: the id), and the wake-up item ``job-wake`` / ``wake``.

Any replica that receives a delivery writes it here, unfenced (an observation, not a
leader action), with ONE conditional write that encodes
:func:`~autoscaler.observe.github.webhook_rows.decide`::

    attribute_not_exists(pk)
    OR (rank < 2 AND (rank < :rank OR (rank = :rank AND data <> :data)))

so a redelivery, an older event, or a ``queued`` after the job's ``completed`` is refused
by DynamoDB itself, whichever replica's write lands first; no read-modify-write races.
A refused write is told apart (duplicate or stale) by reading the item back; that read is
only for the counter. An accepted ``queued``/``waiting`` row is written in one
``TransactWriteItems`` with an ``ADD seq 1`` on the wake-up item: the leader reads that
one small item every second (:meth:`DynamoJobIndex.version`) and ticks at once when it
moved, so a delivery a follower received scales as fast as one the leader received.

The leader's tick reads the partition with a strongly consistent Query (one request per
shard and 1 MB page); items past their ``expires_at`` are skipped (DynamoDB's TTL deletes
them within days) and the TTL keeps the partition to a few hours of jobs. The reconcile's
changes are the leader's and go through the store's fenced transactions, each action
optional (a newer event that landed in between wins).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.errors import StateError, StateUnavailableError
from autoscaler.observe.github.webhook_rows import (
    DONE,
    EVENT,
    Changes,
    IndexRow,
    Outcome,
    decide,
)
from autoscaler.state.dynamodb_table import (
    MAX_TRANSACTION_ITEMS,
    TTL_ATTRIBUTE,
    Cancelled,
    DynamoTable,
    N,
    S,
    key,
)
from autoscaler.state.job_feed import FeedCursor, JobFeed

#: Partitions of the index (``job#0`` ... ): one holds thousands of jobs (1,000 writes a
#: second per partition); more would cost one more Query per tick each.
JOB_SHARDS = 1
WAKE = "job-wake"
#: A refused write whose re-read says "accept" (the item changed in between) is retried.
ATTEMPTS = 3
#: The writers' logs (``job-log`` / ``<writer>#<seq>``) and their heads (``job-writer`` /
#: ``<writer>``: the last entry's number).
LOG, WRITERS = "job-log", "job-writer"
#: Seconds a log entry is kept: a reader is a tick behind; one further behind reads whole.
LOG_TTL = 3600
#: Seconds a writer's head is kept after its last write (a dead writer's goes then).
WRITER_TTL = 7 * 86400
#: Rows in one transaction: DynamoDB takes 100 actions, the log entry, the head and the
#: wake-up item take three.
BATCH_ROWS = MAX_TRANSACTION_ITEMS - 3
#: Bytes of row data in one log entry (an item holds 400 KB).
BATCH_BYTES = 300_000
_REFUSED = "ConditionalCheckFailed"

_NAMES = {"#pk": "pk", "#rank": "rank", "#data": "data"}
_EVENT_CONDITION = (
    "attribute_not_exists(#pk) OR (#rank < :done AND "
    "(#rank < :rank OR (#rank = :rank AND #data <> :data)))"
)
_POLL_CONDITION = "attribute_not_exists(#pk) OR (#rank < :done AND #rank <= :rank)"
_DROP_CONDITION = "#rank = :rank AND #data = :data"


def partition(job_id: int) -> str:
    return f"job#{job_id % JOB_SHARDS}"


def log_key(writer: str, seq: int) -> str:
    return f"{writer}#{seq:012d}"


def item_of(row: IndexRow) -> dict[str, Any]:
    return {
        **key(partition(row.job_id), str(row.job_id)),
        "rank": N(row.rank),
        "data": S(row.data),
        "received_at": N(round(row.received_at, 3)),
        "via": S(row.via),
        TTL_ATTRIBUTE: N(row.expires_at),
    }


def row_of(item: dict[str, Any]) -> IndexRow:
    return IndexRow(
        job_id=int(item["sk"]["S"]),
        rank=int(item["rank"]["N"]),
        data=item["data"]["S"],
        received_at=float(item["received_at"]["N"]),
        via=item.get("via", {}).get("S", EVENT),
    )


@dataclass
class Cursor:
    """A reader's place: in this process's own rows, and in each other writer's log."""

    own: FeedCursor
    others: dict[str, int] = field(default_factory=dict)
    """Writer id -> the sequence number of its last log entry read."""


class DynamoJobIndex:
    """The job index's calls; ``write`` is the store's fenced transaction writer. ``writer``
    names this process's log (unique per process)."""

    def __init__(
        self,
        table: DynamoTable,
        write: Callable[[str, Sequence[dict[str, Any]]], None],
        *,
        writer: str,
        wall_clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.table = table
        self._write = write
        self.writer = writer
        self._wall = wall_clock
        self._sleep = sleep
        self._seq = 0  # the number of this writer's next log entry
        self._feed = JobFeed()
        self._lock = threading.Lock()  # one batch at a time: the log's order is the commit's

    # --- the event writes
    def record(self, rows: Sequence[IndexRow]) -> list[Outcome | StateError]:
        """Write ``rows`` in transactions of up to :data:`BATCH_ROWS`; a job's later rows in
        a later one (a transaction takes one action per item). Outcomes in ``rows``' order."""
        results: list[Outcome | StateError | None] = [None] * len(rows)
        pending = list(range(len(rows)))
        with self._lock:
            while pending:
                batch: list[int] = []
                later: list[int] = []
                jobs: set[int] = set()
                size = 0
                for i in pending:
                    row = rows[i]
                    full = len(batch) >= BATCH_ROWS or size + len(row.data) > BATCH_BYTES
                    if row.job_id in jobs or (batch and full):
                        later.append(i)
                        continue
                    jobs.add(row.job_id)
                    size += len(row.data)
                    batch.append(i)
                self._commit(rows, batch, results)
                pending = later
        return [r if r is not None else Outcome.STALE for r in results]

    def _commit(
        self, rows: Sequence[IndexRow], batch: list[int], results: list[Outcome | StateError | None]
    ) -> None:
        """One transaction of ``batch``'s rows, retried without the rows DynamoDB refused
        (their outcome read back: duplicate or stale)."""
        changed: set[int] = set()  # refused, yet decide accepts them on a re-read
        for attempt in range(ATTEMPTS):
            if not batch:
                return
            try:
                self.table.transact(self._actions([rows[i] for i in batch]))
            except Cancelled as exc:
                reasons = exc.reasons
            except StateError as exc:
                for i in batch:
                    results[i] = exc
                return
            else:
                for i in batch:
                    results[i] = Outcome.ACCEPTED
                self._seq += 1
                self._feed.append(rows[i] for i in batch)
                return
            refused = [i for i, r in zip(batch, reasons, strict=False) if r == _REFUSED]
            if len(reasons) > len(batch) and reasons[len(batch)] == _REFUSED:
                self._seq += 1  # a write this writer gave up on landed after all
                continue
            if not refused:
                if attempt + 1 < ATTEMPTS:
                    self._sleep(0.05 * (attempt + 1))  # a conflict or throttling: again
                continue
            for i in refused:
                current = self.table.get(partition(rows[i].job_id), str(rows[i].job_id))
                outcome = decide(None if current is None else row_of(current), rows[i])
                if outcome is Outcome.ACCEPTED:
                    changed.add(i)  # it changed under us: try again
                else:
                    results[i] = outcome
            batch = [i for i in batch if results[i] is None]
        error = StateUnavailableError(
            f"record_job_events on {self.table.path}: cancelled {ATTEMPTS} times",
            path=self.table.path,
            code="cancelled",
            operation="record_job_events",
        )
        for i in batch:
            # it kept changing under us: others are further along
            results[i] = Outcome.STALE if i in changed else error

    def _actions(self, rows: list[IndexRow]) -> list[dict[str, Any]]:
        """The rows' conditional puts, then this writer's log entry (new only) and log head,
        and the wake-up item's bump when a ``queued``/``waiting`` row is among them."""
        now = self._wall()
        actions: list[dict[str, Any]] = [
            {
                "Put": {
                    "Item": item_of(row),
                    "ConditionExpression": _EVENT_CONDITION,
                    "ExpressionAttributeNames": _NAMES,
                    "ExpressionAttributeValues": {
                        ":done": N(DONE),
                        ":rank": N(row.rank),
                        ":data": S(row.data),
                    },
                }
            }
            for row in rows
        ]
        entry = json.dumps(
            [[r.job_id, r.rank, r.data, round(r.received_at, 3), r.via] for r in rows]
        )
        expires = N(int(now) + LOG_TTL)
        head_expires = N(int(now) + WRITER_TTL)
        actions.append(
            {
                "Put": {
                    "Item": {
                        **key(LOG, log_key(self.writer, self._seq)),
                        "rows": S(entry),
                        "at": N(round(now, 3)),
                        TTL_ATTRIBUTE: expires,
                    },
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": "pk"},
                }
            }
        )
        actions.append(
            {
                "Update": {
                    "Key": key(WRITERS, self.writer),
                    "UpdateExpression": "SET #seq = :seq, #at = :at, #ttl = :ttl",
                    "ExpressionAttributeNames": {"#seq": "seq", "#at": "at", "#ttl": TTL_ATTRIBUTE},
                    "ExpressionAttributeValues": {
                        ":seq": N(self._seq),
                        ":at": N(round(now, 3)),
                        ":ttl": head_expires,
                    },
                }
            }
        )
        if any(row.rank == 0 for row in rows):
            at = max(row.received_at for row in rows if row.rank == 0)
            actions.append(
                {
                    "Update": {
                        "Key": key(WAKE, "wake"),
                        "UpdateExpression": "ADD #seq :one SET received_at = :at",
                        "ExpressionAttributeNames": {"#seq": "seq"},
                        "ExpressionAttributeValues": {":one": N(1), ":at": N(round(at, 3))},
                    }
                }
            )
        return actions

    # --- following the index
    def changes(self, cursor: object | None) -> Changes:
        """This process's own accepted rows (from memory), then each other writer's log
        entries past the cursor (one Query of the writers' heads, one per writer that
        wrote since)."""
        heads = {
            item["sk"]["S"]: int(item["seq"]["N"])
            for item in self.table.query(WRITERS)
            if item["sk"]["S"] != self.writer
        }
        if not isinstance(cursor, Cursor):
            return Changes((), Cursor(self._feed.open(), heads))
        rows: list[IndexRow] = []
        others = dict(cursor.others)  # a writer whose head expired may write again
        complete = True
        for writer, head in heads.items():
            last = cursor.others.get(writer, -1)
            if head > last:
                entries = self.table.query(
                    LOG, between=(log_key(writer, last + 1), log_key(writer, head))
                )
                seqs = [int(e["sk"]["S"].rsplit("#", 1)[1]) for e in entries]
                if seqs != list(range(last + 1, head + 1)):
                    complete = False  # expired before this reader read it
                for entry in entries:
                    rows += [IndexRow(*values) for values in json.loads(entry["rows"]["S"])]
            others[writer] = max(head, last)
        own, own_complete = self._feed.read(cursor.own)
        cursor.others = others
        return Changes((*own, *rows), cursor, complete and own_complete)

    def load(self, now: float) -> list[IndexRow]:
        rows: list[IndexRow] = []
        for shard in range(JOB_SHARDS):
            for item in self.table.query(f"job#{shard}"):
                if float(item.get(TTL_ATTRIBUTE, {}).get("N", now)) < now:
                    continue  # expired, not yet deleted by DynamoDB's TTL
                rows.append(row_of(item))
        return sorted(rows, key=lambda r: r.job_id)

    def reconcile(self, put: Sequence[IndexRow], drop: Sequence[IndexRow]) -> None:
        actions: list[dict[str, Any]] = []
        for row in put:
            actions.append(
                {
                    "Put": {
                        "Item": item_of(row),
                        "ConditionExpression": _POLL_CONDITION,
                        "ExpressionAttributeNames": {"#pk": "pk", "#rank": "rank"},
                        "ExpressionAttributeValues": {":done": N(DONE), ":rank": N(row.rank)},
                    }
                }
            )
        for row in drop:
            actions.append(
                {
                    "Delete": {
                        "Key": key(partition(row.job_id), str(row.job_id)),
                        "ConditionExpression": _DROP_CONDITION,
                        "ExpressionAttributeNames": {"#rank": "rank", "#data": "data"},
                        "ExpressionAttributeValues": {":rank": N(row.rank), ":data": S(row.data)},
                    }
                }
            )
        if actions:
            self._write("reconcile_job_index", actions)

    def version(self) -> str:
        item = self.table.get(WAKE, "wake")
        return "0" if item is None else str(item.get("seq", {}).get("N", "0"))
