"""The DynamoDB state store: what must survive a failover, in one table several controllers
share, every write fenced by the leader lease.

Single-table design (:mod:`autoscaler.state.dynamodb_table` has the schema). Items:

- the lease: ``lease`` / ``lease``: owner, epoch, version, duration (never a TTL);
- an alert state: ``alert`` / fingerprint: the state as JSON (``data``);
- an outbox row: ``outbox`` / ``receiver#event_id``: the notification, attempts, last
  error; once confirmed, ``delivered_at`` and a TTL of a week;
- a GitHub issue number: ``issue`` / ``receiver#fingerprint``;
- a pool's memory: ``pool`` / pool name: back-off, last scale-up, refused launch, pending
  terminations (JSON);
- a cache entry: ``cache`` / the poll's cache key: ETag, Link, compact record; TTL a week;
- the job-retry ledger: ``retry`` / ``rerun:repo#job``, ``exhausted:...``, ``denied:repo``
  (JSON; the ledger drops its own entries after three days);
- the webhook job index: ``job#<shard>`` / job id (rank, the job or its completion as
  JSON, when received; TTL hours to days), and ``job-wake`` / ``wake`` (a counter every
  accepted ``queued`` event bumps): :mod:`autoscaler.state.dynamodb_jobs`.

Every fenced item also carries ``written_epoch`` and ``written_at`` (wall time), for
people reading the table and for the tests that check who wrote what when.

**Fencing.** Every write is one ``TransactWriteItems`` whose first action is a
``ConditionCheck`` on the lease item: ``owner`` and ``epoch`` must still be this
controller's (:meth:`autoscaler.state.lease.Lease.token`; without a token, i.e. not
acting with the margin left, nothing is sent and :class:`NotLeaderError` is raised). A
controller that lost the lease while paused has its write refused by DynamoDB itself
(``fenced``). An alert transition and the outbox rows it owes go in the same transaction,
so one is never stored without the other; the rows are keyed by the notification's
``event_id`` and put only if absent, so a notification is never enqueued twice, and a
confirmed one (``delivered_at``) never comes back as pending: a new leader resends only
what the old one did not confirm.

**Reads** are strongly consistent Queries of one partition (a handful of items, except the
ETag cache, read once at start). Alert states are diffed against what the last
``load_states`` read, so a quiet tick writes nothing; only the leader writes, so that
baseline is what the table holds. The ETag cache is the leader's to persist: a follower's
``save_poll_cache`` keeps its cache in memory and writes nothing.

**The webhook job index** (issue 10) lives here as ``job#<shard>`` partitions. Its event
writes are the exception to fencing: any replica that receives a webhook records it (the
leader reads them), so they are unfenced single-item writes made idempotent by a condition
on the job's rank (:mod:`autoscaler.state.dynamodb_jobs`), with a TTL. The reconcile's
replacement of the index is the leader's and fenced like its other writes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.alerting.lifecycle import AlertState, Notification
from autoscaler.errors import NotLeaderError, StateUnavailableError, StateUnusableError
from autoscaler.observe.github.webhook_rows import IndexRow, Outcome
from autoscaler.scale.memory import PoolMemory
from autoscaler.state.dynamodb_jobs import DynamoJobIndex
from autoscaler.state.dynamodb_table import (
    MAX_ITEM_BYTES,
    MAX_TRANSACTION_BYTES,
    MAX_TRANSACTION_ITEMS,
    TTL_ATTRIBUTE,
    Cancelled,
    DynamoTable,
    N,
    S,
    check_schema,
    item_size,
    key,
)
from autoscaler.state.lease import Lease, LeaseRecord
from autoscaler.state.port import OutboxItem

log = logging.getLogger(__name__)

LEASE = "lease"
ALERT, OUTBOX, ISSUE, POOL, CACHE = "alert", "outbox", "issue", "pool", "cache"
#: Ephemeral runners' JIT ledger: one item per instance (autoscaler.scale.ephemeral).
JIT = "jit"
#: The job-retry ledger's partition (issue 14): re-runs asked, retries exhausted, 403s.
RETRY = "retry"
#: A confirmed notification stays a week (what was delivered, for people), then TTL.
DELIVERED_TTL = 7 * 86400
#: A cache entry nobody rewrote for a week goes (a dead controller's drops never came).
CACHE_TTL = 7 * 86400
#: A transaction cancelled by a conflict or throttling is tried this many times.
TRANSACTION_ATTEMPTS = 3

_FENCE = "#owner = :owner AND #epoch = :epoch"


@dataclass
class _Action:
    """One action of a transaction; ``optional``: its own condition failing means "already
    so" (an outbox row already there, a row already gone), not an error."""

    body: dict[str, Any]
    optional: bool = False
    size: int = 0


@dataclass
class _Group:
    """Actions that must land together (a transition and its outbox rows)."""

    actions: list[_Action] = field(default_factory=list)


class DynamoLeaseTable:
    """:class:`autoscaler.state.lease.LeaseTable` on the lease item."""

    def __init__(self, table: DynamoTable) -> None:
        self.table = table

    def read_lease(self) -> LeaseRecord | None:
        item = self.table.get(LEASE, LEASE)
        if item is None:
            return None
        return LeaseRecord(
            owner=item["owner"]["S"],
            epoch=int(item["epoch"]["N"]),
            version=item["version"]["S"],
            duration=float(item["duration"]["N"]),
            acquired_at=float(item.get("acquired_at", {}).get("N", 0)),
            renewed_at=float(item.get("renewed_at", {}).get("N", 0)),
        )

    def _item(self, record: LeaseRecord) -> dict[str, Any]:
        return {
            **key(LEASE, LEASE),
            "owner": S(record.owner),
            "epoch": N(record.epoch),
            "version": S(record.version),
            "duration": N(float(record.duration)),
            "acquired_at": N(float(record.acquired_at)),
            "renewed_at": N(float(record.renewed_at)),
        }

    def create_lease(self, record: LeaseRecord) -> bool:
        return self.table.put_if(self._item(record), "attribute_not_exists(#pk)", {}, {"#pk": "pk"})

    def replace_lease(self, expected_version: str, record: LeaseRecord) -> bool:
        return self.table.put_if(
            self._item(record),
            "#version = :version",
            {":version": S(expected_version)},
            {"#version": "version"},
        )


class DynamoStore:
    """:class:`autoscaler.state.port.StateStore` in a DynamoDB table, fenced by ``lease``."""

    def __init__(
        self,
        table: DynamoTable,
        lease: Lease,
        *,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.table = table
        self.lease = lease
        self.path = table.path
        self._wall = wall_clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._baseline: dict[str, str] | None = None
        self._closed = False
        self._jobs = DynamoJobIndex(table, self._write_each)

    def close(self) -> None:
        self._closed = True

    def check_table(self) -> None:
        """The table exists with our schema (raises StateUnusableError saying what is not)."""
        check_schema(self.table, self.table.describe())

    def _open(self, operation: str) -> None:
        if self._closed:
            raise StateUnusableError(
                f"{self.path} is closed (the controller is stopping)",
                path=self.path,
                code="closed",
                operation=operation,
            )

    # --- fenced writes

    def _token(self, operation: str) -> tuple[str, int]:
        self._open(operation)
        token = self.lease.token()
        if token is None:
            raise NotLeaderError(
                f"{operation} not written: this controller does not hold the lease on "
                f"{self.path} (with its safety margin left)",
                path=self.path,
                code="not_leader",
                operation=operation,
            )
        return token

    def _stamp(self, epoch: int) -> dict[str, Any]:
        return {"written_epoch": N(epoch), "written_at": N(round(self._wall(), 3))}

    def _write(self, operation: str, groups: Sequence[_Group]) -> None:
        """Write ``groups`` in fenced transactions, each group whole in one of them."""
        owner, epoch = self._token(operation)
        check = {
            "ConditionCheck": {
                "Key": key(LEASE, LEASE),
                "ConditionExpression": _FENCE,
                "ExpressionAttributeNames": {"#owner": "owner", "#epoch": "epoch"},
                "ExpressionAttributeValues": {":owner": S(owner), ":epoch": N(epoch)},
            }
        }
        batch: list[_Action] = []
        size = 0
        for group in groups:
            g_size = sum(a.size for a in group.actions)
            full = len(batch) + len(group.actions) > MAX_TRANSACTION_ITEMS - 1
            if batch and (full or size + g_size > MAX_TRANSACTION_BYTES):
                self._transact(operation, check, batch, epoch)
                batch, size = [], 0
            batch += group.actions
            size += g_size
        if batch:
            self._transact(operation, check, batch, epoch)

    def _transact(
        self, operation: str, check: dict[str, Any], batch: list[_Action], epoch: int
    ) -> None:
        for attempt in range(TRANSACTION_ATTEMPTS):
            try:
                self.table.transact([check, *(a.body for a in batch)])
            except Cancelled as exc:
                reasons = exc.reasons
            else:
                return
            if reasons and reasons[0] == "ConditionalCheckFailed":
                raise NotLeaderError(
                    f"{operation} refused by {self.path}: another controller took the lease "
                    f"(this one held epoch {epoch}); it is the leader now",
                    path=self.path,
                    code="fenced",
                    operation=operation,
                )
            failed = {i - 1 for i, r in enumerate(reasons) if i and r == "ConditionalCheckFailed"}
            if failed and all(batch[i].optional for i in failed):
                batch = [a for i, a in enumerate(batch) if i not in failed]
                if not batch:
                    return
                continue  # already so (a row already enqueued, or already gone): the rest
            if failed:
                raise StateUnusableError(
                    f"{operation} on {self.path}: an item changed under this leader "
                    f"({', '.join(sorted(set(reasons)))})",
                    path=self.path,
                    code="conflict",
                    operation=operation,
                )
            if attempt + 1 < TRANSACTION_ATTEMPTS:
                self._sleep(0.05 * (attempt + 1))
                continue
            raise StateUnavailableError(
                f"{operation} on {self.path} cancelled: {', '.join(sorted(set(reasons)))}",
                path=self.path,
                code="cancelled",
                operation=operation,
            )

    def _put(
        self, pk: str, sk: str, attrs: dict[str, Any], epoch: int, *, only_new: bool = False
    ) -> _Action:
        item = {**key(pk, sk), **attrs, **self._stamp(epoch)}
        body: dict[str, Any] = {"Item": item}
        if only_new:
            body["ConditionExpression"] = "attribute_not_exists(#sk)"
            body["ExpressionAttributeNames"] = {"#sk": "sk"}
        return _Action({"Put": body}, optional=only_new, size=item_size(item))

    @staticmethod
    def _delete(pk: str, sk: str) -> _Action:
        return _Action({"Delete": {"Key": key(pk, sk)}}, size=len(pk) + len(sk) + 8)

    # --- alert states and the outbox (AlertStore)

    def load_states(self) -> dict[str, AlertState]:
        self._open("load_states")
        items = self.table.query(ALERT)
        baseline = {i["sk"]["S"]: i["data"]["S"] for i in items}
        states = {fp: AlertState.from_dict(json.loads(data)) for fp, data in baseline.items()}
        with self._lock:
            self._baseline = baseline
        return states

    def save(
        self, states: Mapping[str, AlertState], outbox: Sequence[tuple[str, Notification]] = ()
    ) -> None:
        _, epoch = self._token("save")
        with self._lock:
            baseline = self._baseline
        if baseline is None:
            self.load_states()
            with self._lock:
                baseline = self._baseline or {}
        now = {fp: json.dumps(s.to_dict(), sort_keys=True) for fp, s in states.items()}
        groups: dict[str, _Group] = {}
        for fp, data in now.items():
            if baseline.get(fp) != data:
                groups[fp] = _Group([self._put(ALERT, fp, {"data": S(data)}, epoch)])
        for fp in baseline:
            if fp not in now:
                groups[fp] = _Group([self._delete(ALERT, fp)])
        seq = int(self._wall() * 1_000_000) * 1000
        for i, (receiver, n) in enumerate(outbox):
            row = {
                "receiver": S(receiver),
                "event_id": S(n.event_id),
                "seq": N(seq + i),
                "data": S(json.dumps(n.to_dict(), sort_keys=True)),
                "attempts": N(0),
            }
            action = self._put(OUTBOX, f"{receiver}#{n.event_id}", row, epoch, only_new=True)
            groups.setdefault(n.fingerprint, _Group()).actions.append(action)
        try:
            self._write("save", list(groups.values()))
        except BaseException:
            with self._lock:
                self._baseline = None  # partly written, perhaps: read again before a diff
            raise
        with self._lock:
            self._baseline = now

    def pending(self, receiver: str | None = None) -> list[OutboxItem]:
        self._open("pending")
        items = self.table.query(OUTBOX, filter_expression="attribute_not_exists(delivered_at)")
        out: list[tuple[int, OutboxItem]] = []
        for i in items:
            if receiver is not None and i["receiver"]["S"] != receiver:
                continue
            error = i.get("last_error", {}).get("S")
            item = OutboxItem(
                id=i["sk"]["S"],
                receiver=i["receiver"]["S"],
                notification=Notification.from_dict(json.loads(i["data"]["S"])),
                attempts=int(i.get("attempts", {}).get("N", 0)),
                last_error=error,
            )
            out.append((int(i["seq"]["N"]), item))
        return [item for _, item in sorted(out, key=lambda p: (p[0], p[1].id))]

    def mark_delivered(self, item_id: str) -> None:
        _, epoch = self._token("mark_delivered")
        now = self._wall()
        update = {
            "Key": key(OUTBOX, item_id),
            "UpdateExpression": (
                "SET delivered_at = :now, delivered_epoch = :epoch, "
                f"{TTL_ATTRIBUTE} = :ttl, written_epoch = :epoch, written_at = :now"
            ),
            "ConditionExpression": "attribute_exists(#sk)",
            "ExpressionAttributeNames": {"#sk": "sk"},
            "ExpressionAttributeValues": {
                ":now": N(round(now, 3)),
                ":epoch": N(epoch),
                ":ttl": N(int(now) + DELIVERED_TTL),
            },
        }
        self._write("mark_delivered", [_Group([_Action({"Update": update}, optional=True)])])

    def mark_failed(self, item_id: str, error: str) -> None:
        _, epoch = self._token("mark_failed")
        update = {
            "Key": key(OUTBOX, item_id),
            "UpdateExpression": (
                "SET attempts = attempts + :one, last_error = :error, "
                "written_epoch = :epoch, written_at = :now"
            ),
            "ConditionExpression": "attribute_exists(#sk) AND attribute_not_exists(delivered_at)",
            "ExpressionAttributeNames": {"#sk": "sk"},
            "ExpressionAttributeValues": {
                ":one": N(1),
                ":error": S(error[:500] or "-"),
                ":epoch": N(epoch),
                ":now": N(round(self._wall(), 3)),
            },
        }
        self._write("mark_failed", [_Group([_Action({"Update": update}, optional=True)])])

    def issue_number(self, receiver: str, fingerprint: str) -> int | None:
        self._open("issue_number")
        item = self.table.get(ISSUE, f"{receiver}#{fingerprint}")
        return None if item is None else int(item["number"]["N"])

    def set_issue_number(self, receiver: str, fingerprint: str, number: int | None) -> None:
        _, epoch = self._token("set_issue_number")
        sk = f"{receiver}#{fingerprint}"
        action = (
            self._delete(ISSUE, sk)
            if number is None
            else self._put(ISSUE, sk, {"number": N(number)}, epoch)
        )
        self._write("set_issue_number", [_Group([action])])

    # --- the GitHub poll's ETag cache (PollCacheStore)

    def load_poll_cache(self) -> dict[str, str]:
        self._open("load_poll_cache")
        return {i["sk"]["S"]: i["value"]["S"] for i in self.table.query(CACHE)}

    def save_poll_cache(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        if self.lease.token() is None:
            log.debug("GitHub cache kept in memory: a follower does not write the table")
            return
        _, epoch = self._token("save_poll_cache")
        expires = int(self._wall()) + CACHE_TTL
        groups: list[_Group] = []
        for k, value in put.items():
            action = self._put(CACHE, k, {"value": S(value), TTL_ATTRIBUTE: N(expires)}, epoch)
            if action.size > MAX_ITEM_BYTES:
                log.debug("GitHub cache entry of %d bytes not persisted", action.size)
                continue
            groups.append(_Group([action]))
        groups += [_Group([self._delete(CACHE, k)]) for k in drop]
        self._write("save_poll_cache", groups)

    # --- the scaler's memory (ScalingMemoryStore)

    def load_pools(self) -> dict[str, PoolMemory]:
        self._open("load_pools")
        return {
            i["sk"]["S"]: PoolMemory.from_dict(i["sk"]["S"], json.loads(i["data"]["S"]))
            for i in self.table.query(POOL)
        }

    def save_pools(self, put: Mapping[str, PoolMemory], drop: Collection[str]) -> None:
        _, epoch = self._token("save_pools")
        groups = [
            _Group([self._put(POOL, p, {"data": S(json.dumps(m.to_dict()))}, epoch)])
            for p, m in put.items()
        ]
        groups += [_Group([self._delete(POOL, p)]) for p in drop]
        self._write("save_pools", groups)

    # --- ephemeral runners' JIT ledger (JitLedgerStore): fenced like the pools' memory, so
    # a controller that lost the lease cannot record an intent, and so never asks GitHub.
    def load_jit_records(self) -> dict[str, str]:
        self._open("load_jit_records")
        return {i["sk"]["S"]: i["data"]["S"] for i in self.table.query(JIT)}

    def save_jit_records(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        _, epoch = self._token("save_jit_records")
        groups = [
            _Group([self._put(JIT, iid, {"data": S(text)}, epoch)]) for iid, text in put.items()
        ]
        groups += [_Group([self._delete(JIT, iid)]) for iid in drop]
        self._write("save_jit_records", groups)

    # --- the job-retry ledger (autoscaler.retry.ledger.JobRetryStore)

    def load_job_retries(self) -> dict[str, str]:
        self._open("load_job_retries")
        return {i["sk"]["S"]: i["value"]["S"] for i in self.table.query(RETRY)}

    def save_job_retries(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        """Fenced like every leader write: only the leader re-runs, and records it."""
        _, epoch = self._token("save_job_retries")
        groups = [_Group([self._put(RETRY, k, {"value": S(v)}, epoch)]) for k, v in put.items()]
        groups += [_Group([self._delete(RETRY, k)]) for k in drop]
        self._write("save_job_retries", groups)

    # --- the webhook job index (autoscaler.observe.github.webhook_rows.JobIndexStore)

    def _write_each(self, operation: str, actions: Sequence[dict[str, Any]]) -> None:
        """Fenced, each action optional (its condition failing: a newer event won)."""
        groups = [
            _Group(
                [_Action(a, optional=True, size=item_size(a["Put"]["Item"]) if "Put" in a else 64)]
            )
            for a in actions
        ]
        self._write(operation, groups)

    def record_job_event(self, row: IndexRow) -> Outcome:
        """Any replica's, unfenced: an observation, idempotent by its condition."""
        self._open("record_job_event")
        return self._jobs.record(row)

    def load_job_index(self, now: float) -> list[IndexRow]:
        self._open("load_job_index")
        return self._jobs.load(now)

    def reconcile_job_index(self, put: Sequence[IndexRow], drop: Sequence[IndexRow]) -> None:
        self._jobs.reconcile(put, drop)

    def job_index_version(self) -> str | None:
        self._open("job_index_version")
        return self._jobs.version()
