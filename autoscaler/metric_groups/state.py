"""The state store's and leadership's metrics: store errors, the lease, fenced actions.

Set by autoscaler/state (sqlite, dynamodb, the lease keeper, the fence) for every stage
that persists or acts as leader; not alerting's own, though alerting was their first
user. Split out of telemetry.py unchanged (names, help, labels, order).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from autoscaler.metric_groups.common import P


class StateMetrics:
    """State store failures, leadership and the actions the fence skipped."""

    def _register_state(self, r: CollectorRegistry) -> None:
        """The state store and the leader lease."""
        self.state_store_errors = Counter(
            P + "state_store_errors_total",
            "Failed uses of the state store by operation and code (locked, corrupt, "
            "not_a_database, read_only, cannot_open, permission, disk_full, io_error; "
            "table_missing, throttled, unreachable, not_leader, fenced, ...).",
            ["operation", "code"],
            registry=r,
        )
        self.leader = Gauge(
            P + "leader",
            "1 while this controller may act (it holds the leader lease with its safety "
            "margin, or the state backend needs no lease), 0 on a follower.",
            registry=r,
        )
        self.lease_transitions = Counter(
            P + "lease_transitions_total",
            "Changes of this controller's leadership: acquired, lost, released.",
            ["event"],
            registry=r,
        )
        self.fenced_actions = Counter(
            P + "fenced_actions_total",
            "Leader-only actions this controller skipped because it did not hold the lease "
            "with its safety margin (set_desired_capacity, protect, terminate, remove_runner, "
            "notify).",
            ["action"],
            registry=r,
        )
