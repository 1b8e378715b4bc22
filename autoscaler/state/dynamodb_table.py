"""The state table: its schema (one definition, for ``state create-table`` and checked against
the terraform module), and the DynamoDB client narrowed to the calls the store makes.

**Schema.** One table, single-table design: a string partition key ``pk`` naming the kind
of item and a string sort key ``sk`` naming the item within it; on-demand billing
(the load is a few requests a second, spiky at failover); point-in-time recovery on;
DynamoDB's TTL on ``expires_at`` (unix seconds) removes what no one needs any more
(confirmed notifications after a week, cache entries nobody rewrote in a week). The item
kinds are listed in :mod:`autoscaler.state.dynamodb`.

**Calls** (:data:`IAM_ACTIONS`, the task role's grant on this table and nothing else):
``GetItem`` and ``Query`` (always strongly consistent: a new leader must see every write
of the old one), ``PutItem``/``UpdateItem`` (the lease), ``TransactWriteItems`` (every
other write: its Put, Update, Delete and ConditionCheck parts are authorised as
``PutItem``, ``UpdateItem``, ``DeleteItem`` and ``ConditionCheckItem``) and
``DescribeTable`` (at start, to say plainly when the table is missing). Creating the table
(``CreateTable``, ``UpdateTimeToLive``, ``UpdateContinuousBackups``) is for a person or
terraform, not the controller.

**Errors** are translated here, by error code and type (never message text), into
:class:`~autoscaler.errors.StateError` subclasses naming the table and what to do:

- ResourceNotFoundException: StateUnusableError ``table_missing``;
- AccessDenied*, UnrecognizedClient, no credentials: StateUnusableError ``permission``;
- ValidationException and any other 4xx: StateUnusableError with the AWS code;
- Throttling, ProvisionedThroughputExceeded, RequestLimitExceeded: StateUnavailableError
  ``throttled``; TransactionConflict on a single-item write: StateUnavailableError
  ``conflict``;
- 5xx, timeouts, connection failures: StateUnavailableError (``unreachable`` or the code);
- a transaction whose fencing check failed: NotLeaderError ``fenced`` (in the store).

Every call is timed and counted in ``ci_autoscaler_aws_calls_total{operation,code}`` like
the Auto Scaling calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from autoscaler.aws_sdk import boto_config, client_error_code, translate
from autoscaler.config import AwsConfig
from autoscaler.errors import (
    AuthenticationError,
    RateLimitedError,
    StateError,
    StateUnavailableError,
    StateUnusableError,
    TransientError,
)
from autoscaler.telemetry import Metrics

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

#: The key attributes and the TTL attribute, as terraform's ``aws_dynamodb_table`` names them.
HASH_KEY, RANGE_KEY, TTL_ATTRIBUTE = "pk", "sk", "expires_at"
BILLING_MODE = "PAY_PER_REQUEST"

IAM_ACTIONS: frozenset[str] = frozenset(
    {
        "dynamodb:DescribeTable",
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",
    }
)

#: Actions in one TransactWriteItems (DynamoDB's limit is 100; one is the fencing check).
MAX_TRANSACTION_ITEMS = 100
#: Bytes of items in one transaction (DynamoDB's limit is 4 MB; room for keys and names).
MAX_TRANSACTION_BYTES = 3_500_000
#: An item must stay under 400 KB; a cache entry larger than this is not persisted.
MAX_ITEM_BYTES = 380_000

_THROTTLED = frozenset(
    {"ProvisionedThroughputExceededException", "RequestLimitExceeded", "ThrottlingException"}
)
#: A single-item write that met a transaction in flight on the same item: try again.
_CONFLICT = frozenset({"TransactionConflictException", "TransactionInProgressException"})


@dataclass(frozen=True)
class TableSchema:
    """What ``state create-table`` creates and the terraform module declares."""

    hash_key: str = HASH_KEY
    range_key: str = RANGE_KEY
    attributes: tuple[tuple[str, str], ...] = ((HASH_KEY, "S"), (RANGE_KEY, "S"))
    billing_mode: str = BILLING_MODE
    ttl_attribute: str = TTL_ATTRIBUTE
    point_in_time_recovery: bool = True

    def create_request(self, name: str, tags: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The CreateTable parameters (TTL and point-in-time recovery are separate calls)."""
        request: dict[str, Any] = {
            "TableName": name,
            "AttributeDefinitions": [
                {"AttributeName": a, "AttributeType": t} for a, t in self.attributes
            ],
            "KeySchema": [
                {"AttributeName": self.hash_key, "KeyType": "HASH"},
                {"AttributeName": self.range_key, "KeyType": "RANGE"},
            ],
            "BillingMode": self.billing_mode,
        }
        if tags:
            request["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
        return request

    def differences(self, described: Mapping[str, Any]) -> list[str]:
        """How a DescribeTable answer's ``Table`` differs from this schema (keys, billing)."""
        problems: list[str] = []
        keys = {k["KeyType"]: k["AttributeName"] for k in described.get("KeySchema", [])}
        if keys != {"HASH": self.hash_key, "RANGE": self.range_key}:
            problems.append(f"key schema is {keys}, want pk (hash) and sk (range)")
        types = {a["AttributeName"]: a["AttributeType"] for a in described["AttributeDefinitions"]}
        for name, kind in self.attributes:
            if types.get(name) != kind:
                problems.append(f"attribute {name} is {types.get(name)}, want {kind}")
        billing = described.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED")
        if billing != self.billing_mode:
            problems.append(f"billing mode is {billing}, want {self.billing_mode}")
        return problems


SCHEMA = TableSchema()


class Cancelled(Exception):
    """A transaction was cancelled; ``reasons`` are DynamoDB's codes, one per action
    (``"None"`` for an action that was fine)."""

    def __init__(self, reasons: Sequence[str]) -> None:
        super().__init__(", ".join(reasons))
        self.reasons = list(reasons)


def S(value: str) -> dict[str, str]:
    return {"S": value}


def N(value: float) -> dict[str, str]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {HASH_KEY: S(pk), RANGE_KEY: S(sk)}


def item_size(item: Mapping[str, Any]) -> int:
    """An upper bound of an item's size as DynamoDB counts it (names plus values)."""
    return sum(len(k) + sum(len(str(v)) for v in val.values()) for k, val in item.items())


class DynamoTable:
    """The state table, narrowed to the calls the store makes."""

    def __init__(
        self,
        aws: AwsConfig,
        name: str,
        metrics: Metrics,
        *,
        session: boto3.session.Session | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.name = name
        self.region = aws.region
        self.metrics = metrics
        session = session if session is not None else boto3.session.Session()
        cfg = boto_config(aws, connect_timeout=timeout, read_timeout=timeout)
        #: The raw client (the CLI's create-table and tests use it).
        self.client: DynamoDBClient = session.client(
            "dynamodb", region_name=aws.region, endpoint_url=aws.endpoint_url, config=cfg
        )

    @property
    def path(self) -> str:
        """How messages name it."""
        return f"dynamodb table {self.name} ({self.region})"

    def call(self, operation: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """One call, timed and counted by operation and error code; errors translated
        (a cancelled transaction raises :class:`Cancelled` with its reasons)."""
        started = time.perf_counter()
        code = ""
        try:
            return fn(**kwargs)
        except ClientError as exc:
            code, _ = client_error_code(exc)
            if code == "TransactionCanceledException":
                reasons = exc.response.get("CancellationReasons") or []
                raise Cancelled([str(r.get("Code", "None")) for r in reasons]) from None
            raise self.translate(exc, operation) from None
        except Exception as exc:  # the SDK's edge: whatever it raises is translated
            error = self.translate(exc, operation)
            code = error.code
            raise error from None
        finally:
            self.metrics.aws_calls.labels(operation, code).inc()
            self.metrics.aws_call_duration.labels(operation, code).observe(
                time.perf_counter() - started
            )

    def translate(self, exc: Exception, operation: str) -> StateError:
        """Our StateError for what the SDK raised, naming the table and what to do."""
        code = client_error_code(exc)[0] if isinstance(exc, ClientError) else ""
        if code == "ResourceNotFoundException":
            return StateUnusableError(
                f"{self.path} does not exist: create it with `ci-autoscaler state create-table "
                "--config FILE` (or the terraform controller module's state_table_name); "
                "until then this controller neither scales nor notifies",
                path=self.path,
                code="table_missing",
                operation=operation,
            )
        if code in _CONFLICT:
            return StateUnavailableError(
                f"{self.path}: {operation} met a transaction on the same item; retried",
                path=self.path,
                code="conflict",
                operation=operation,
            )
        if code in _THROTTLED:
            return StateUnavailableError(
                f"{self.path} throttled {operation}; retried at the next step",
                path=self.path,
                code="throttled",
                operation=operation,
            )
        ours = translate(exc, operation)
        if isinstance(ours, AuthenticationError):
            return StateUnusableError(
                f"not allowed to use {self.path} ({ours.code}): the controller's role needs "
                f"{', '.join(sorted(IAM_ACTIONS))} on this table",
                path=self.path,
                code="permission",
                operation=operation,
            )
        if isinstance(ours, RateLimitedError):
            return StateUnavailableError(
                f"{self.path} throttled {operation}",
                path=self.path,
                code="throttled",
                operation=operation,
            )
        if isinstance(ours, TransientError):
            reach = "unreachable" if isinstance(exc, BotoCoreError) else ours.code
            return StateUnavailableError(
                f"{self.path}: {operation} failed ({ours.code}); retried at the next step",
                path=self.path,
                code=reach or "unreachable",
                operation=operation,
            )
        return StateUnusableError(
            f"{self.path}: {operation} failed ({ours.code or ours.kind}); "
            "--log-level debug shows the request",
            path=self.path,
            code=ours.code or "dynamodb_error",
            operation=operation,
        )

    # --- the calls

    def describe(self) -> dict[str, Any]:
        answer = self.call("DescribeTable", self.client.describe_table, TableName=self.name)
        return dict(answer["Table"])

    def get(self, pk: str, sk: str) -> dict[str, Any] | None:
        answer = self.call(
            "GetItem",
            self.client.get_item,
            TableName=self.name,
            Key=key(pk, sk),
            ConsistentRead=True,
        )
        item = answer.get("Item")
        return None if item is None else dict(item)

    def query(
        self,
        pk: str,
        *,
        filter_expression: str | None = None,
        between: tuple[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every item under ``pk`` (all pages; ``between``: whose sort key is in that
        range, both ends included), strongly consistent, in sort key order."""
        kwargs: dict[str, Any] = {
            "TableName": self.name,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": HASH_KEY},
            "ExpressionAttributeValues": {":pk": S(pk)},
            "ConsistentRead": True,
        }
        if between is not None:
            kwargs["KeyConditionExpression"] += " AND #sk BETWEEN :low AND :high"
            kwargs["ExpressionAttributeNames"]["#sk"] = RANGE_KEY
            kwargs["ExpressionAttributeValues"] |= {":low": S(between[0]), ":high": S(between[1])}
        if filter_expression is not None:
            kwargs["FilterExpression"] = filter_expression
        items: list[dict[str, Any]] = []
        while True:
            page = self.call("Query", self.client.query, **kwargs)
            items += page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if not start:
                return items
            kwargs["ExclusiveStartKey"] = start

    def put_if(
        self,
        item: Mapping[str, Any],
        condition: str,
        values: Mapping[str, Any],
        names: Mapping[str, str],
    ) -> bool:
        """Put ``item`` if ``condition`` holds; False if it did not."""
        kwargs: dict[str, Any] = {
            "TableName": self.name,
            "Item": dict(item),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": dict(names),
        }
        if values:
            kwargs["ExpressionAttributeValues"] = dict(values)
        try:
            self.call("PutItem", self.client.put_item, **kwargs)
        except StateUnusableError as exc:
            if exc.code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def transact(self, actions: Sequence[Mapping[str, Any]]) -> None:
        """One TransactWriteItems; raises :class:`Cancelled` with the reasons."""
        items = [
            {kind: {"TableName": self.name, **body}} for a in actions for kind, body in a.items()
        ]
        self.call("TransactWriteItems", self.client.transact_write_items, TransactItems=items)


def check_schema(
    table: DynamoTable, described: Mapping[str, Any], schema: TableSchema = SCHEMA
) -> None:
    """Raise StateUnusableError (code ``schema``) if the described table is not ours."""
    problems = schema.differences(described)
    if problems:
        raise StateUnusableError(
            f"{table.path} exists with another schema: {'; '.join(problems)}. Use another "
            "state.table, or delete this one",
            path=table.path,
            code="schema",
            operation="DescribeTable",
        )


def create_table(
    table: DynamoTable,
    schema: TableSchema = SCHEMA,
    *,
    wait: float = 120.0,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Create the state table as terraform does (keys, on-demand billing), wait until it is
    active, then turn on TTL on ``expires_at`` and point-in-time recovery. Returns
    ``created``, or ``exists`` for a table already there with this schema (TTL and
    point-in-time recovery are turned on if they were off). A table with other keys or
    billing raises StateUnusableError (code ``schema``) listing the differences."""
    try:
        table.call("CreateTable", table.client.create_table, **schema.create_request(table.name))
        outcome = "created"
    except StateUnusableError as exc:
        if exc.code != "ResourceInUseException":
            raise
        outcome = "exists"
    deadline = time.monotonic() + wait
    while True:
        described = table.describe()
        if described.get("TableStatus") == "ACTIVE":
            break
        if time.monotonic() >= deadline:
            raise StateUnavailableError(
                f"{table.path} is still {described.get('TableStatus')} after {wait:.0f}s",
                path=table.path,
                code="not_active",
                operation="CreateTable",
            )
        sleep(1.0)
    check_schema(table, described, schema)
    ttl = table.call("DescribeTimeToLive", table.client.describe_time_to_live, TableName=table.name)
    status = ttl.get("TimeToLiveDescription", {})
    if status.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        table.call(
            "UpdateTimeToLive",
            table.client.update_time_to_live,
            TableName=table.name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": schema.ttl_attribute},
        )
    elif status.get("AttributeName") != schema.ttl_attribute:
        raise StateUnusableError(
            f"{table.path} expires items on {status.get('AttributeName')}, want "
            f"{schema.ttl_attribute}",
            path=table.path,
            code="schema",
            operation="DescribeTimeToLive",
        )
    if schema.point_in_time_recovery:
        table.call(
            "UpdateContinuousBackups",
            table.client.update_continuous_backups,
            TableName=table.name,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
        )
    return outcome
