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

from collections.abc import Callable, Sequence
from typing import Any

from autoscaler.errors import StateUnavailableError
from autoscaler.observe.github.webhook_rows import DONE, EVENT, IndexRow, Outcome, decide
from autoscaler.state.dynamodb_table import TTL_ATTRIBUTE, Cancelled, DynamoTable, N, S, key

#: Partitions of the index (``job#0`` ... ): one holds thousands of jobs (1,000 writes a
#: second per partition); more would cost one more Query per tick each.
JOB_SHARDS = 1
WAKE = "job-wake"
#: A refused write whose re-read says "accept" (the item changed in between) is retried.
ATTEMPTS = 3

_NAMES = {"#pk": "pk", "#rank": "rank", "#data": "data"}
_EVENT_CONDITION = (
    "attribute_not_exists(#pk) OR (#rank < :done AND "
    "(#rank < :rank OR (#rank = :rank AND #data <> :data)))"
)
_POLL_CONDITION = "attribute_not_exists(#pk) OR (#rank < :done AND #rank <= :rank)"
_DROP_CONDITION = "#rank = :rank AND #data = :data"


def partition(job_id: int) -> str:
    return f"job#{job_id % JOB_SHARDS}"


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


class DynamoJobIndex:
    """The job index's calls; ``write`` is the store's fenced transaction writer."""

    def __init__(
        self,
        table: DynamoTable,
        write: Callable[[str, Sequence[dict[str, Any]]], None],
    ) -> None:
        self.table = table
        self._write = write

    def record(self, row: IndexRow) -> Outcome:
        item = item_of(row)
        values = {":done": N(DONE), ":rank": N(row.rank), ":data": S(row.data)}
        for _ in range(ATTEMPTS):
            if self._put(row, item, values):
                return Outcome.ACCEPTED
            current = self.table.get(partition(row.job_id), str(row.job_id))
            outcome = decide(None if current is None else row_of(current), row)
            if outcome is not Outcome.ACCEPTED:
                return outcome
        return Outcome.STALE  # it kept changing under us: others are further along

    def _put(self, row: IndexRow, item: dict[str, Any], values: dict[str, Any]) -> bool:
        if row.rank > 0:
            return self.table.put_if(item, _EVENT_CONDITION, values, _NAMES)
        put = {
            "Put": {
                "Item": item,
                "ConditionExpression": _EVENT_CONDITION,
                "ExpressionAttributeNames": _NAMES,
                "ExpressionAttributeValues": values,
            }
        }
        wake = {
            "Update": {
                "Key": key(WAKE, "wake"),
                "UpdateExpression": "ADD #seq :one SET received_at = :at",
                "ExpressionAttributeNames": {"#seq": "seq"},
                "ExpressionAttributeValues": {":one": N(1), ":at": N(round(row.received_at, 3))},
            }
        }
        try:
            self.table.transact([put, wake])
        except Cancelled as exc:
            if exc.reasons and exc.reasons[0] == "ConditionalCheckFailed":
                return False
            raise self._unavailable(exc) from None
        return True

    def _unavailable(self, exc: Cancelled) -> StateUnavailableError:
        return StateUnavailableError(
            f"record_job_event on {self.table.path} cancelled: {', '.join(exc.reasons)}",
            path=self.table.path,
            code="cancelled",
            operation="record_job_event",
        )

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
