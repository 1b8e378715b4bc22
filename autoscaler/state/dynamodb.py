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
- the job-retry ledger: ``retry`` / ``rerun:repo#run#attempt``, ``exhausted:...``, ``denied:repo``
  (JSON; the ledger drops its own entries after three days);
- the webhook job index: ``job#<shard>`` / job id (rank, the job or its completion as
  JSON, when received; TTL hours to days), and ``job-wake`` / ``wake`` (a counter every
  accepted ``queued`` event bumps): :mod:`autoscaler.state.dynamodb_jobs`.

Every fenced item also carries ``written_epoch`` and ``written_at`` (wall time), for
people reading the table and for the tests that check who wrote what when.

**Fencing** (:mod:`autoscaler.state.dynamodb_lease`). Every write is one
``TransactWriteItems`` whose first action is a ``ConditionCheck`` on the lease item:
``owner`` and ``epoch`` must still be this controller's
(:meth:`autoscaler.state.lease.Lease.token`; without a token, i.e. not acting with the
margin left, nothing is sent and :class:`NotLeaderError` is raised). A controller that
lost the lease while paused has its write refused by DynamoDB itself (``fenced``). An
alert transition and the outbox rows it owes go in the same transaction, so one is never
stored without the other; the rows are keyed by the notification's ``event_id`` and put
only if absent, so a notification is never enqueued twice, and a confirmed one
(``delivered_at``) never comes back as pending: a new leader resends only
what the old one did not confirm.

**Reads** are strongly consistent Queries of one partition (a handful of items, except the
ETag cache, read once at start). Alert states are diffed against what the last
``load_states`` read, so a quiet tick writes nothing; only the leader writes, so that
baseline is what the table holds. The ETag cache is the leader's to persist: a follower's
``save_poll_cache`` keeps its cache in memory and writes nothing.

**The webhook job index** lives here as ``job#<shard>`` partitions. Its event
writes are the exception to fencing: any replica that receives a webhook records it (the
leader reads them), so they are unfenced single-item writes made idempotent by a condition
on the job's rank (:mod:`autoscaler.state.dynamodb_jobs`), with a TTL. The reconcile's
replacement of the index is the leader's and fenced like its other writes.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from autoscaler.alerting.lifecycle import AlertState, Notification
from autoscaler.alerting.store import OutboxItem
from autoscaler.errors import StateError
from autoscaler.observe.github.webhook_rows import Changes, IndexRow, Outcome
from autoscaler.scale.memory import PoolMemory
from autoscaler.state.dynamodb_jobs import DynamoJobIndex
from autoscaler.state.dynamodb_lease import Action, FencedWriter, Group
from autoscaler.state.dynamodb_table import (
    MAX_ITEM_BYTES,
    TTL_ATTRIBUTE,
    DynamoTable,
    N,
    S,
    check_schema,
    key,
)
from autoscaler.state.lease import Lease

log = logging.getLogger(__name__)

ALERT, OUTBOX, ISSUE, POOL, CACHE = "alert", "outbox", "issue", "pool", "cache"
#: The handover ledger: one item per instance (autoscaler.scale.handover).
JIT = "jit"
#: The job-retry ledger's partition: run re-runs asked, retries exhausted, 403s.
RETRY = "retry"
#: A confirmed notification stays a week (what was delivered, for people), then TTL.
DELIVERED_TTL = 7 * 86400
#: A cache entry nobody rewrote for a week goes (a dead controller's drops never came).
CACHE_TTL = 7 * 86400


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
        self._lock = threading.Lock()
        self._baseline: dict[str, str] | None = None
        self._fence = FencedWriter(table, lease, wall_clock=wall_clock, sleep=sleep)
        self._jobs = DynamoJobIndex(
            table,
            self._fence.write_each,
            writer=f"{lease.owner}.{secrets.token_hex(4)}",
            wall_clock=wall_clock,
            sleep=sleep,
        )

    def close(self) -> None:
        self._fence.closed = True

    def check_table(self) -> None:
        """The table exists with our schema (raises StateUnusableError saying what is not)."""
        check_schema(self.table, self.table.describe())

    # --- alert states and the outbox (AlertStore)

    def load_states(self) -> dict[str, AlertState]:
        self._fence.check_open("load_states")
        items = self.table.query(ALERT)
        baseline = {i["sk"]["S"]: i["data"]["S"] for i in items}
        states = {fp: AlertState.from_dict(json.loads(data)) for fp, data in baseline.items()}
        with self._lock:
            self._baseline = baseline
        return states

    def save(
        self, states: Mapping[str, AlertState], outbox: Sequence[tuple[str, Notification]] = ()
    ) -> None:
        _, epoch = self._fence.token("save")
        with self._lock:
            baseline = self._baseline
        if baseline is None:
            self.load_states()
            with self._lock:
                baseline = self._baseline or {}
        now = {fp: json.dumps(s.to_dict(), sort_keys=True) for fp, s in states.items()}
        groups: dict[str, Group] = {}
        for fp, data in now.items():
            if baseline.get(fp) != data:
                groups[fp] = Group([self._fence.put(ALERT, fp, {"data": S(data)}, epoch)])
        for fp in baseline:
            if fp not in now:
                groups[fp] = Group([self._fence.delete(ALERT, fp)])
        seq = int(self._wall() * 1_000_000) * 1000
        for i, (receiver, n) in enumerate(outbox):
            row = {
                "receiver": S(receiver),
                "event_id": S(n.event_id),
                "seq": N(seq + i),
                "data": S(json.dumps(n.to_dict(), sort_keys=True)),
                "attempts": N(0),
            }
            action = self._fence.put(OUTBOX, f"{receiver}#{n.event_id}", row, epoch, only_new=True)
            groups.setdefault(n.fingerprint, Group()).actions.append(action)
        try:
            self._fence.write("save", list(groups.values()))
        except BaseException:
            with self._lock:
                self._baseline = None  # partly written, perhaps: read again before a diff
            raise
        with self._lock:
            self._baseline = now

    def pending(self, receiver: str | None = None) -> list[OutboxItem]:
        self._fence.check_open("pending")
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
        _, epoch = self._fence.token("mark_delivered")
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
        self._fence.write("mark_delivered", [Group([Action({"Update": update}, optional=True)])])

    def mark_failed(self, item_id: str, error: str) -> None:
        _, epoch = self._fence.token("mark_failed")
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
        self._fence.write("mark_failed", [Group([Action({"Update": update}, optional=True)])])

    def issue_number(self, receiver: str, fingerprint: str) -> int | None:
        self._fence.check_open("issue_number")
        item = self.table.get(ISSUE, f"{receiver}#{fingerprint}")
        return None if item is None else int(item["number"]["N"])

    def set_issue_number(self, receiver: str, fingerprint: str, number: int | None) -> None:
        _, epoch = self._fence.token("set_issue_number")
        sk = f"{receiver}#{fingerprint}"
        action = (
            self._fence.delete(ISSUE, sk)
            if number is None
            else self._fence.put(ISSUE, sk, {"number": N(number)}, epoch)
        )
        self._fence.write("set_issue_number", [Group([action])])

    # --- the GitHub poll's ETag cache (PollCacheStore)

    def load_poll_cache(self) -> dict[str, str]:
        self._fence.check_open("load_poll_cache")
        return {i["sk"]["S"]: i["value"]["S"] for i in self.table.query(CACHE)}

    def save_poll_cache(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        if self.lease.token() is None:
            log.debug("GitHub cache kept in memory: a follower does not write the table")
            return
        _, epoch = self._fence.token("save_poll_cache")
        expires = int(self._wall()) + CACHE_TTL
        groups: list[Group] = []
        for k, value in put.items():
            action = self._fence.put(
                CACHE, k, {"value": S(value), TTL_ATTRIBUTE: N(expires)}, epoch
            )
            if action.size > MAX_ITEM_BYTES:
                log.debug("GitHub cache entry of %d bytes not persisted", action.size)
                continue
            groups.append(Group([action]))
        groups += [Group([self._fence.delete(CACHE, k)]) for k in drop]
        self._fence.write("save_poll_cache", groups)

    # --- the scaler's memory (ScalingMemoryStore)

    def load_pools(self) -> dict[str, PoolMemory]:
        self._fence.check_open("load_pools")
        return {
            i["sk"]["S"]: PoolMemory.from_dict(i["sk"]["S"], json.loads(i["data"]["S"]))
            for i in self.table.query(POOL)
        }

    def save_pools(self, put: Mapping[str, PoolMemory], drop: Collection[str]) -> None:
        _, epoch = self._fence.token("save_pools")
        groups = [
            Group([self._fence.put(POOL, p, {"data": S(json.dumps(m.to_dict()))}, epoch)])
            for p, m in put.items()
        ]
        groups += [Group([self._fence.delete(POOL, p)]) for p in drop]
        self._fence.write("save_pools", groups)

    # --- the handover ledger (HandoverStore): fenced like the pools' memory, so
    # a controller that lost the lease cannot record an intent, and so never asks GitHub.
    def load_jit_records(self) -> dict[str, str]:
        self._fence.check_open("load_jit_records")
        return {i["sk"]["S"]: i["data"]["S"] for i in self.table.query(JIT)}

    def save_jit_records(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        _, epoch = self._fence.token("save_jit_records")
        groups = [
            Group([self._fence.put(JIT, iid, {"data": S(text)}, epoch)])
            for iid, text in put.items()
        ]
        groups += [Group([self._fence.delete(JIT, iid)]) for iid in drop]
        self._fence.write("save_jit_records", groups)

    # --- the job-retry ledger (autoscaler.job_retry.ledger.JobRetryStore)

    def load_job_retries(self) -> dict[str, str]:
        self._fence.check_open("load_job_retries")
        return {i["sk"]["S"]: i["value"]["S"] for i in self.table.query(RETRY)}

    def save_job_retries(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        """Fenced like every leader write: only the leader re-runs, and records it."""
        _, epoch = self._fence.token("save_job_retries")
        groups = [
            Group([self._fence.put(RETRY, k, {"value": S(v)}, epoch)]) for k, v in put.items()
        ]
        groups += [Group([self._fence.delete(RETRY, k)]) for k in drop]
        self._fence.write("save_job_retries", groups)

    # --- the webhook job index (autoscaler.observe.github.webhook_rows.JobIndexStore)

    def record_job_events(self, rows: Sequence[IndexRow]) -> list[Outcome | StateError]:
        """Any replica's, unfenced: observations, idempotent by their conditions."""
        self._fence.check_open("record_job_events")
        return self._jobs.record(rows)

    def load_job_index(self, now: float) -> list[IndexRow]:
        self._fence.check_open("load_job_index")
        return self._jobs.load(now)

    def job_index_changes(self, cursor: object | None) -> Changes:
        self._fence.check_open("job_index_changes")
        return self._jobs.changes(cursor)

    def prune_job_index(self, now: float) -> None:
        """Nothing: DynamoDB's TTL deletes expired rows (reads skip them until then)."""

    def reconcile_job_index(self, put: Sequence[IndexRow], drop: Sequence[IndexRow]) -> None:
        self._jobs.reconcile(put, drop)

    def job_index_version(self) -> str | None:
        self._fence.check_open("job_index_version")
        return self._jobs.version()
