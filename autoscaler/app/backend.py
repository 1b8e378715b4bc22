"""The state backend, chosen from ``state.backend``: the store, and whether a lease decides
who acts.

- ``sqlite``: :class:`~autoscaler.state.sqlite.SqliteStore`; no lease (the file lock keeps a
  second controller out), so this controller always acts and ``ci_autoscaler_leader`` is 1.
- ``dynamodb``: :class:`~autoscaler.state.dynamodb.DynamoStore` on the table named in the
  config (region and endpoint from ``aws``), a :class:`~autoscaler.state.lease.Lease`
  whose keeper thread renews or watches it, and a :class:`~autoscaler.state.fence.Fence`
  that every leader-only action asks right before it happens.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
import uuid
from dataclasses import dataclass

import boto3

from autoscaler.config import DYNAMODB, Config
from autoscaler.health import Health
from autoscaler.ports import ActionGate, SoleWriter
from autoscaler.state.dynamodb import DynamoStore
from autoscaler.state.dynamodb_lease import DynamoLeaseTable
from autoscaler.state.dynamodb_table import DynamoTable
from autoscaler.state.fence import Fence
from autoscaler.state.keeper import LeaseKeeper
from autoscaler.state.lease import Lease
from autoscaler.state.port import StateStore
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics


@dataclass
class Backend:
    store: StateStore
    gate: ActionGate
    """Asked before each leader-only action (always yes without a lease)."""
    lease: Lease | None = None
    keeper: LeaseKeeper | None = None
    fence: Fence | None = None
    """The gate, when there is a lease: the pools and the runner source are wrapped in it."""


def owner_id() -> str:
    """This process's name in the lease: host, pid and a random suffix (a restarted
    process on the same host with the same pid is another owner)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def open_backend(
    config: Config,
    metrics: Metrics,
    health: Health,
    *,
    session: boto3.session.Session | None = None,
) -> Backend:
    """The configured backend; nothing is contacted yet (the keeper's first step does)."""
    state = config.state
    if state.backend != DYNAMODB:
        metrics.leader.set(1)
        return Backend(SqliteStore.from_config(state), SoleWriter())
    # A request must answer well within the lease: a third of it (at least a second).
    timeout = max(1.0, state.lease_duration / 3)
    table = DynamoTable(config.aws, state.table, metrics, session=session, timeout=timeout)
    lease = Lease(
        DynamoLeaseTable(table),
        owner_id(),
        state.lease_duration,
        monotonic=time.monotonic,
        wall_clock=time.time,
        new_version=lambda: uuid.uuid4().hex,
        table_name=table.path,
    )
    store = DynamoStore(table, lease)
    keeper = LeaseKeeper(lease, metrics, health, check=store.check_table)
    fence = Fence(
        lease,
        on_refused=lambda action: metrics.fenced_actions.labels(action).inc(),
        name=table.path,
    )
    return Backend(store, fence, lease, keeper, fence)
