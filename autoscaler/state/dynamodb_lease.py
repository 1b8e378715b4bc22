"""The lease item of the DynamoDB state table, and the fence it puts on every leader write.

Two sides of one item (``lease`` / ``lease``): :class:`DynamoLeaseTable` is how the lease
(:mod:`autoscaler.state.lease`) reads and replaces it, conditionally on its version;
:class:`FencedWriter` is how the store writes anything else: one ``TransactWriteItems``
whose first action is a ``ConditionCheck`` that the lease's ``owner`` and ``epoch`` are
still this controller's, so a controller that lost the lease while paused has its write
refused by DynamoDB itself. Groups of actions that must land together stay in one
transaction; a conflict or throttling is retried a few times; an action whose own condition
failing means "already so" is dropped and the rest written. Apart from what the store keeps
(:mod:`autoscaler.state.dynamodb`): this is how it writes, not what.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.errors import NotLeaderError, StateUnavailableError, StateUnusableError
from autoscaler.state.dynamodb_table import (
    MAX_TRANSACTION_BYTES,
    MAX_TRANSACTION_ITEMS,
    Cancelled,
    DynamoTable,
    N,
    S,
    item_size,
    key,
)
from autoscaler.state.lease import Lease, LeaseRecord

LEASE = "lease"
#: A transaction cancelled by a conflict or throttling is tried this many times.
TRANSACTION_ATTEMPTS = 3

_FENCE = "#owner = :owner AND #epoch = :epoch"


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


@dataclass
class Action:
    """One action of a transaction; ``optional``: its own condition failing means "already
    so" (an outbox row already there, a row already gone), not an error."""

    body: dict[str, Any]
    optional: bool = False
    size: int = 0


@dataclass
class Group:
    """Actions that must land together (a transition and its outbox rows)."""

    actions: list[Action] = field(default_factory=list)


class FencedWriter:
    """Writes to the table, each transaction fenced by ``lease``; refuses once closed.
    Built by :class:`~autoscaler.state.dynamodb.DynamoStore`, whose clocks it uses."""

    def __init__(
        self,
        table: DynamoTable,
        lease: Lease,
        *,
        wall_clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.table = table
        self.lease = lease
        self.path = table.path
        self._wall = wall_clock
        self._sleep = sleep
        self.closed = False

    def check_open(self, operation: str) -> None:
        """Refuse any call once the store is closed (the controller is stopping)."""
        if self.closed:
            raise StateUnusableError(
                f"{self.path} is closed (the controller is stopping)",
                path=self.path,
                code="closed",
                operation=operation,
            )

    def token(self, operation: str) -> tuple[str, int]:
        """The lease's (owner, epoch) to fence with; NotLeaderError when not acting."""
        self.check_open(operation)
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

    def stamp(self, epoch: int) -> dict[str, Any]:
        """Who wrote an item and when, for people reading the table."""
        return {"written_epoch": N(epoch), "written_at": N(round(self._wall(), 3))}

    def write(self, operation: str, groups: Sequence[Group]) -> None:
        """Write ``groups`` in fenced transactions, each group whole in one of them."""
        owner, epoch = self.token(operation)
        check = {
            "ConditionCheck": {
                "Key": key(LEASE, LEASE),
                "ConditionExpression": _FENCE,
                "ExpressionAttributeNames": {"#owner": "owner", "#epoch": "epoch"},
                "ExpressionAttributeValues": {":owner": S(owner), ":epoch": N(epoch)},
            }
        }
        batch: list[Action] = []
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
        self, operation: str, check: dict[str, Any], batch: list[Action], epoch: int
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

    def put(
        self, pk: str, sk: str, attrs: dict[str, Any], epoch: int, *, only_new: bool = False
    ) -> Action:
        """A stamped put; ``only_new``: only if absent, and "already there" is no error."""
        item = {**key(pk, sk), **attrs, **self.stamp(epoch)}
        body: dict[str, Any] = {"Item": item}
        if only_new:
            body["ConditionExpression"] = "attribute_not_exists(#sk)"
            body["ExpressionAttributeNames"] = {"#sk": "sk"}
        return Action({"Put": body}, optional=only_new, size=item_size(item))

    @staticmethod
    def delete(pk: str, sk: str) -> Action:
        """A delete (of an item that may already be gone)."""
        return Action({"Delete": {"Key": key(pk, sk)}}, size=len(pk) + len(sk) + 8)

    def write_each(self, operation: str, actions: Sequence[dict[str, Any]]) -> None:
        """Fenced, each action optional (its condition failing: a newer event won)."""
        groups = [
            Group(
                [Action(a, optional=True, size=item_size(a["Put"]["Item"]) if "Put" in a else 64)]
            )
            for a in actions
        ]
        self.write(operation, groups)
