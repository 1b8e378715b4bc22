"""The DynamoDB state store against moto's server: the same contract as the
SQLite store, every write fenced by the lease's epoch, the table's schema, and its errors.

Both backends run the contract tests (``store`` is parametrized); the fencing and error
tests are DynamoDB's own.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.alerting.evaluation import FLEET, Evaluation
from autoscaler.alerting.lifecycle import AlertState, AlertStatus, Notification
from autoscaler.config import AwsConfig
from autoscaler.errors import NotLeaderError, StateUnavailableError, StateUnusableError
from autoscaler.scale.memory import PoolMemory
from autoscaler.sim.fleet import moto_session
from autoscaler.state.dynamodb import DynamoStore
from autoscaler.state.dynamodb_lease import DynamoLeaseTable
from autoscaler.state.dynamodb_table import (
    SCHEMA,
    TTL_ATTRIBUTE,
    DynamoTable,
    create_table,
)
from autoscaler.state.lease import Lease
from autoscaler.state.port import StateStore
from autoscaler.telemetry import Metrics
from tests.conftest import free_port

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
TABLE = "state-test"
_versions = itertools.count()


def session() -> boto3.session.Session:
    return moto_session()


def dynamo_table(endpoint: str, name: str = TABLE, metrics: Metrics | None = None) -> DynamoTable:
    aws = AwsConfig(region="us-east-1", endpoint_url=endpoint)
    return DynamoTable(aws, name, metrics or Metrics(CollectorRegistry()), session=session())


class Clock:
    """A process's monotonic clock, moved by the test (a paused process's stands still)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lease_on(
    table: DynamoTable, owner: str, duration: float = 30.0, clock: Clock | None = None
) -> Lease:
    return Lease(
        DynamoLeaseTable(table),
        owner,
        duration,
        monotonic=clock or time.monotonic,
        wall_clock=time.time,
        new_version=lambda: f"{owner}-{next(_versions)}",
        table_name=table.path,
    )


@pytest.fixture
def moto(moto_endpoint: str) -> Iterator[str]:
    """The worker's moto server, emptied, with the state table."""
    assert create_table(dynamo_table(moto_endpoint), sleep=lambda _: None) == "created"
    yield moto_endpoint


def leading_store(endpoint: str, owner: str = "a") -> DynamoStore:
    table = dynamo_table(endpoint)
    lease = lease_on(table, owner)
    assert lease.step().event.value == "acquired"
    return DynamoStore(table, lease)


def evaluation(rule: str = "queue", breached: bool = True) -> Evaluation:
    return Evaluation(
        rule=rule,
        scope=FLEET,
        team="t",
        priority="P2",
        description="d",
        receivers=("hook",),
        values={"max_queue_size": 3, "threshold_breached": int(breached)},
    )


def firing(rule: str = "queue") -> tuple[AlertState, Notification]:
    ev = evaluation(rule)
    state = AlertState(AlertStatus.FIRING, ev, since=T0, fired_at=T0, last_notified=T0)
    return state, Notification("FIRING", ev, started_at=T0, created_at=T0)


# --- the contract, both backends -----------------------------------------------------


def test_a_transition_and_its_notification_are_stored_together(store: StateStore) -> None:
    state, note = firing()
    store.save({state.fingerprint: state}, [("hook", note), ("pager", note)])
    assert store.load_states() == {state.fingerprint: state}
    owed = store.pending()
    assert [(i.receiver, i.notification) for i in owed] == [("hook", note), ("pager", note)]
    assert [i.receiver for i in store.pending("pager")] == ["pager"]


def test_delivered_is_never_pending_again_and_failures_are_counted(store: StateStore) -> None:
    state, note = firing()
    store.save({state.fingerprint: state}, [("hook", note), ("pager", note)])
    hook, pager = store.pending()
    store.mark_failed(pager.id, "HTTP 503")
    store.mark_failed(pager.id, "HTTP 502")
    store.mark_delivered(hook.id)
    [left] = store.pending()
    assert (left.receiver, left.attempts, left.last_error) == ("pager", 2, "HTTP 502")
    store.mark_delivered(left.id)
    assert store.pending() == []


def test_states_replace_the_stored_ones(store: StateStore) -> None:
    a, _ = firing("a")
    b, _ = firing("b")
    store.save({a.fingerprint: a, b.fingerprint: b})
    assert set(store.load_states()) == {a.fingerprint, b.fingerprint}
    resolved = AlertState(AlertStatus.RESOLVED, evaluation("a", breached=False), since=T0)
    store.save({a.fingerprint: resolved})
    assert store.load_states() == {a.fingerprint: resolved}


def test_issue_numbers_cache_and_pools_round_trip(store: StateStore) -> None:
    store.set_issue_number("issues", "fp1", 42)
    assert store.issue_number("issues", "fp1") == 42
    store.set_issue_number("issues", "fp1", None)
    assert store.issue_number("issues", "fp1") is None
    store.save_poll_cache({"u1": "v1", "u2": "v2"}, ())
    store.save_poll_cache({"u2": "v2b"}, ["u1"])
    assert store.load_poll_cache() == {"u2": "v2b"}
    memory = PoolMemory(backoff_until=T0 + timedelta(minutes=5), backoff_seconds=300.0)
    store.save_pools({"gpu-spot": memory, "gpu-od": PoolMemory(scaled_up_at=T0)}, ())
    store.save_pools({}, ["gpu-od"])
    assert store.load_pools() == {"gpu-spot": memory}


def test_the_jit_ledger_round_trips(store: StateStore) -> None:
    """Ephemeral runners' JIT records, the same in both backends."""
    store.save_jit_records({"i-1": '{"a": 1}', "i-2": '{"b": 2}'}, ())
    store.save_jit_records({"i-1": '{"a": 3}'}, ["i-2"])
    assert store.load_jit_records() == {"i-1": '{"a": 3}'}


def test_the_job_retry_ledger_round_trips(store: StateStore) -> None:
    """What was re-run survives a restart and a change of leader, on both backends,
    through the ledger's own codec."""
    from autoscaler.job_retry.ledger import Ledger, Rerun, decode, diff, encode  # noqa: PLC0415

    rerun = Rerun("app", 70, 1, T0, "spot_interruption", (7, 8), asked=False)
    first = Ledger(reruns={rerun.key: rerun})
    second = Ledger(reruns=dict(first.reruns), denied={"web": T0})
    put, drop = diff({}, first)
    store.save_job_retries(put, drop)
    put, drop = diff(encode(first), second)
    store.save_job_retries(put, drop)
    assert decode(store.load_job_retries()) == second
    put, drop = diff(encode(second), Ledger(reruns=dict(first.reruns)))
    store.save_job_retries(put, drop)
    assert decode(store.load_job_retries()) == first


# --- DynamoDB: fencing -----------------------------------------------------------------


def raw(endpoint: str) -> Any:
    return session().client("dynamodb", endpoint_url=endpoint)


def items(endpoint: str, pk: str) -> list[dict[str, Any]]:
    return list(
        raw(endpoint).query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
        )["Items"]
    )


def test_a_paused_leader_cannot_write_after_its_successor(moto: str) -> None:
    """The leader decided to write while it held the lease, then paused (its clock stands
    still here: from where it stands it still leads); a follower saw the lease unchanged
    for a whole lease and took it. DynamoDB refuses the paused one's write: nothing lands."""
    table = dynamo_table(moto)
    old = DynamoStore(table, lease_on(table, "a", clock=Clock()))
    assert old.lease.step().event.value == "acquired"
    later = Clock()
    successor = lease_on(dynamo_table(moto), "b", clock=later)
    successor.step()
    later.now += 30.0
    assert successor.step().event.value == "acquired"
    assert old.lease.acting(), "the paused process does not know yet"

    state, note = firing()
    with pytest.raises(NotLeaderError) as info:
        old.save({state.fingerprint: state}, [("hook", note)])
    assert info.value.code == "fenced" and "another controller took the lease" in str(info.value)
    assert items(moto, "alert") == [] and items(moto, "outbox") == []
    with pytest.raises(NotLeaderError):
        old.save_pools({"gpu-spot": PoolMemory(scaled_up_at=T0)}, ())
    with pytest.raises(NotLeaderError):
        old.set_issue_number("issues", "fp", 3)
    with pytest.raises(NotLeaderError):  # no intent recorded: no JIT config asked
        old.save_jit_records({"i-1": "{}"}, ())
    with pytest.raises(NotLeaderError):
        old.save_job_retries({"rerun:app#7": "{}"}, ())
    assert items(moto, "pool") == [] and items(moto, "issue") == []
    assert items(moto, "retry") == [] and items(moto, "jit") == []


def test_a_follower_writes_nothing_and_sends_no_request(moto: str) -> None:
    leader = leading_store(moto)
    metrics = Metrics(CollectorRegistry())
    table = dynamo_table(moto, metrics=metrics)
    follower = DynamoStore(table, lease_on(table, "b"))
    follower.lease.step()
    assert not follower.lease.acting()
    state, note = firing()
    with pytest.raises(NotLeaderError) as info:
        follower.save({state.fingerprint: state}, [("hook", note)])
    assert info.value.code == "not_leader"
    follower.save_poll_cache({"u": "v"}, ())  # its cache stays in memory, silently
    writes = metrics.registry.get_sample_value(
        "ci_autoscaler_aws_calls_total", {"operation": "TransactWriteItems", "code": ""}
    )
    assert writes is None
    assert leader.load_poll_cache() == {}
    assert follower.load_states() == {}, "reads are allowed"


def test_every_write_carries_its_epoch_and_a_confirmed_row_stays_a_week(moto: str) -> None:
    s = leading_store(moto)
    state, note = firing()
    s.save({state.fingerprint: state}, [("hook", note)])
    [owed] = s.pending()
    s.mark_delivered(owed.id)
    [row] = items(moto, "outbox")
    assert row["sk"]["S"] == f"hook#{note.event_id}"
    assert row["written_epoch"]["N"] == row["delivered_epoch"]["N"] == "1"
    ttl = int(row[TTL_ATTRIBUTE]["N"]) - float(row["delivered_at"]["N"])
    assert 7 * 86400 - 5 < ttl <= 7 * 86400
    [alert] = items(moto, "alert")
    assert alert["written_epoch"]["N"] == "1" and TTL_ATTRIBUTE not in alert


def test_a_notification_is_enqueued_once_even_if_saved_twice(moto: str) -> None:
    """Saving the same transition again (a save whose answer was lost, retried) neither
    duplicates the row nor revives a confirmed one."""
    s = leading_store(moto)
    state, note = firing()
    s.save({state.fingerprint: state}, [("hook", note)])
    [owed] = s.pending()
    s.mark_delivered(owed.id)
    s.save({}, [])
    s.save({state.fingerprint: state}, [("hook", note)])
    assert s.pending() == [] and len(items(moto, "outbox")) == 1
    assert s.load_states() == {state.fingerprint: state}


def test_a_quiet_tick_writes_nothing(moto: str) -> None:
    metrics = Metrics(CollectorRegistry())
    table = dynamo_table(moto, metrics=metrics)
    lease = lease_on(table, "a")
    lease.step()
    s = DynamoStore(table, lease)
    state, note = firing()
    s.save({state.fingerprint: state}, [("hook", note)])
    writes = "ci_autoscaler_aws_calls_total"
    labels = {"operation": "TransactWriteItems", "code": ""}
    before = metrics.registry.get_sample_value(writes, labels)
    for _ in range(3):
        s.save(s.load_states(), [])
    assert metrics.registry.get_sample_value(writes, labels) == before


def test_many_changes_are_split_into_transactions_keeping_each_transition_whole(
    moto: str,
) -> None:
    s = leading_store(moto)
    states = {}
    outbox = []
    for i in range(70):
        state, note = firing(f"rule-{i}")
        states[state.fingerprint] = state
        outbox.append(("hook", note))
    s.save(states, outbox)  # 140 items: two transactions
    assert len(s.load_states()) == 70 and len(s.pending()) == 70


# --- DynamoDB: the table and its errors --------------------------------------------------


def test_create_table_makes_the_schema_terraform_declares(moto: str) -> None:
    client = raw(moto)
    table = client.describe_table(TableName=TABLE)["Table"]
    assert SCHEMA.differences(table) == []
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ttl = client.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)
    backups = client.describe_continuous_backups(TableName=TABLE)["ContinuousBackupsDescription"]
    assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
    assert create_table(dynamo_table(moto), sleep=lambda _: None) == "exists"


def test_a_table_with_another_schema_is_refused_by_name(moto: str) -> None:
    raw(moto).create_table(
        TableName="other",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(StateUnusableError) as info:
        create_table(dynamo_table(moto, "other"), sleep=lambda _: None)
    assert info.value.code == "schema"
    assert "want pk (hash) and sk (range)" in str(info.value)
    store = DynamoStore(dynamo_table(moto, "other"), lease_on(dynamo_table(moto, "other"), "a"))
    with pytest.raises(StateUnusableError):
        store.check_table()


def test_a_missing_table_is_one_clear_error(moto: str) -> None:
    table = dynamo_table(moto, "nowhere")
    lease = lease_on(table, "a")
    step = lease.step()
    assert step.event.value == "error" and step.error is not None
    assert isinstance(step.error, StateUnusableError) and step.error.code == "table_missing"
    assert str(step.error).startswith("dynamodb table nowhere (us-east-1) does not exist")
    assert "ci-autoscaler state create-table" in str(step.error)
    assert not lease.acting()


def test_an_unreachable_endpoint_is_transient_and_named() -> None:
    table = dynamo_table(f"http://127.0.0.1:{free_port()}")
    step = lease_on(table, "a").step()
    assert isinstance(step.error, StateUnavailableError)
    assert step.error.code == "unreachable" and "dynamodb table state-test" in str(step.error)
