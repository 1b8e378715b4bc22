"""Scaling's metrics: pools, scaling actions, cloud retries, provisioning, budgets,
ephemeral runners and AWS calls.

Set by autoscaler/scale (scaler, provisioning, budgets, the JIT ledger) and its AWS
adapter: what the controller did about the queue and what the cloud answered. Split
out of telemetry.py unchanged (names, help, labels, order).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from autoscaler.metric_groups.common import FAST, P

#: Capacity asked -> runner online: an instance boots in one to a few minutes.
_PROVISION = (30.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0, 900.0, 1800.0, 3600.0)


class ScalingMetrics:
    """Pools, scaling actions, provisioning, budgets, ephemeral runners, AWS calls."""

    def _register_scaling(self, r: CollectorRegistry) -> None:
        """Pools and scaling, then ephemeral runners, then AWS API calls."""
        self.pool_desired_capacity = Gauge(
            P + "pool_desired_capacity",
            "Desired capacity of a pool.",
            ["runner_type", "pool"],
            registry=r,
        )
        self.pool_instances = Gauge(
            P + "pool_instances",
            "Instances in a pool by lifecycle (pending, in_service, terminating, other).",
            ["runner_type", "pool", "lifecycle"],
            registry=r,
        )
        self.pool_max_size = Gauge(
            P + "pool_max_size", "MaxSize of a pool.", ["runner_type", "pool"], registry=r
        )
        self.scale_actions = Counter(
            P + "scale_actions_total",
            "Scaling actions taken (scale_up, scale_in, terminate_orphan, deregister_stale).",
            ["runner_type", "pool", "action"],
            registry=r,
        )
        self.cloud_retries = Counter(
            P + "cloud_retries_total",
            "Retried cloud calls by pool and error class.",
            ["pool", "error_class"],
            registry=r,
        )
        self.cloud_failures = Counter(
            P + "cloud_failures_total",
            "Cloud calls that failed after retries, by pool and error class.",
            ["pool", "error_class"],
            registry=r,
        )
        self.pool_failovers = Counter(
            P + "pool_failovers_total",
            "Capacity failovers from a pool to the next.",
            ["runner_type", "pool"],
            registry=r,
        )
        self.provisioning_failures = Counter(
            P + "provisioning_failures_total",
            "Instances that never became runners, and capacity failures.",
            ["runner_type", "pool", "reason"],
            registry=r,
        )
        self.provisioning_seconds = Histogram(
            P + "provisioning_seconds",
            "Time from a scale-up of a pool to each new runner of it online.",
            ["runner_type", "pool"],
            buckets=_PROVISION,
            registry=r,
        )
        self.orphans_kept = Counter(
            P + "orphans_kept_total",
            "Orphan instances not terminated: their runner registered after the poll"
            " (registered), GitHub could not be asked (lookup_failed), or the clocks"
            " disagree too much to judge an instance's age (clock_skew).",
            ["runner_type", "pool", "reason"],
            registry=r,
        )
        self.deferred_terminations = Counter(
            P + "deferred_terminations_total",
            "Terminations that failed after the runner was deregistered; retried first next tick.",
            ["runner_type", "pool"],
            registry=r,
        )
        self.runner_deletions_already_gone = Counter(
            P + "runner_deletions_already_gone_total",
            "Runner deletions GitHub answered 404 Not Found: the runner was already gone"
            " (not an error; nothing was left to remove).",
            ["runner_type", "pool"],
            registry=r,
        )
        self.pending_terminations = Gauge(
            P + "pending_terminations",
            "Instances of deregistered runners still waiting for their termination.",
            ["runner_type", "pool"],
            registry=r,
        )
        self.clock_skew = Gauge(
            P + "clock_skew_seconds",
            "A peer's clock minus ours, from the Date header of its last answer"
            " (peer: github, aws; positive: the peer is ahead).",
            ["peer"],
            registry=r,
        )
        self.pool_backoff_remaining = Gauge(
            P + "pool_capacity_backoff_seconds",
            "Seconds a pool out of capacity is still skipped (0: available).",
            ["pool"],
            registry=r,
        )
        self.budget_instances = Gauge(
            P + "budget_instances", "Instances counted against a budget.", ["budget"], registry=r
        )
        self.budget_max_instances = Gauge(
            P + "budget_max_instances", "A budget's limit.", ["budget"], registry=r
        )
        # --- ephemeral runners: JIT configs and spent machines
        self.jit_configs = Counter(
            P + "jit_configs_total",
            "Just-in-time runner configs asked of GitHub for ephemeral instances, by result"
            " (created, adopted, conflict, rejected, forbidden, rate_limited, failed,"
            " handover_failed).",
            ["runner_type", "result"],
            registry=r,
        )
        self.spent_instances_terminated = Counter(
            P + "spent_instances_terminated_total",
            "Ephemeral instances terminated (desired capacity decremented) because their"
            " runner ran its one job.",
            ["pool"],
            registry=r,
        )
        self.aws_calls = Counter(
            P + "aws_calls_total",
            "AWS API calls by operation and error code ('' = ok).",
            ["operation", "code"],
            registry=r,
        )
        self.aws_call_duration = Histogram(
            P + "aws_call_duration_seconds",
            "AWS API call latency by operation and error code.",
            ["operation", "code"],
            buckets=FAST,
            registry=r,
        )
