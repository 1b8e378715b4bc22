"""The lease keeper's reports: ``ci_autoscaler_leader`` at scrape time, a
``lease`` problem in readiness while the table cannot be used, one log line per problem
(not one per step), transitions counted, and the loop woken when this one takes over."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.errors import StateUnusableError
from autoscaler.health import LEASE, Health
from autoscaler.state.keeper import LeaseKeeper
from autoscaler.telemetry import Metrics
from tests.unit.test_lease import Clock, D, FakeTable, lease


def keeper(table: FakeTable, owner: str = "a") -> tuple[LeaseKeeper, Metrics, Health, list[str]]:
    metrics, health, woken = Metrics(CollectorRegistry()), Health(), []
    k = LeaseKeeper(
        lease(table, owner),
        metrics,
        health,
        on_acquired=lambda: woken.append(owner),
        monotonic=table.clock,
    )
    return k, metrics, health, woken


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_leader_gauge_follows_the_lease_at_scrape_time() -> None:
    table = FakeTable(Clock())
    k, metrics, _, woken = keeper(table)
    assert value(metrics, "ci_autoscaler_leader") == 0.0
    k.step()
    assert value(metrics, "ci_autoscaler_leader") == 1.0 and woken == ["a"]
    assert value(metrics, "ci_autoscaler_lease_transitions_total", event="acquired") == 1.0
    table.clock.advance(D)  # no renewal: the lease lapsed, though no step ran yet
    assert value(metrics, "ci_autoscaler_leader") == 0.0


def test_a_missing_table_is_a_readiness_problem_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = FakeTable(Clock())
    missing = StateUnusableError(
        "dynamodb table t (us-east-1) does not exist: create it with `ci-autoscaler state "
        "create-table --config FILE`",
        path="dynamodb table t",
        code="table_missing",
        operation="GetItem",
    )

    def check() -> None:
        if table.fail:
            raise missing

    metrics, health = Metrics(CollectorRegistry()), Health()
    k = LeaseKeeper(lease(table, "a"), metrics, health, monotonic=table.clock, check=check)
    table.fail = 1
    with caplog.at_level(logging.ERROR, logger="autoscaler.state.keeper"):
        for _ in range(5):
            table.fail = 1
            k.step()
            table.clock.advance(5)
    assert health.problems()[LEASE].startswith("dynamodb table t (us-east-1) does not exist")
    assert len([r for r in caplog.records if "does not exist" in r.getMessage()]) == 1
    assert value(metrics, "ci_autoscaler_state_store_errors_total", operation="lease",
                 code="table_missing") == 5  # fmt: skip
    table.fail = 0
    table.clock.advance(60)
    k.step()
    assert health.problems() == {} and value(metrics, "ci_autoscaler_leader") == 1.0


def test_stopping_releases_the_lease_for_the_next_one() -> None:
    table = FakeTable(Clock())
    a, metrics, _, _ = keeper(table, "a")
    b, _, _, woken = keeper(table, "b")
    a.step()
    b.step()
    a.stop(release=True)
    assert value(metrics, "ci_autoscaler_lease_transitions_total", event="released") == 1.0
    b.step()
    assert woken == ["b"] and b.lease.acting()
