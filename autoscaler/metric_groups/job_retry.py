"""Metrics of jobs lost to infrastructure: re-runs and EC2 interruptions.

Set by autoscaler/retry (the job-retry stage) and the interruption queue reader.
Split out of telemetry.py unchanged (names, help, labels, order).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from autoscaler.metric_groups.common import P


class JobRetryMetrics:
    """Jobs lost to infrastructure: re-runs and EC2 interruptions."""

    def _register_job_retry(self, r: CollectorRegistry) -> None:
        """Job retries, interruption events and the interruption queue's errors."""
        self.job_retries = Counter(
            P + "job_retries_total",
            "Failed jobs judged by the job-retry stage, by runner type, reason (the"
            " classifier's evidence: spot_interruption, runner_lost, user, ...) and result"
            " (rerun, skip, already, outage, exhausted, denied, deferred, failed).",
            ["runner_type", "reason", "result"],
            registry=r,
        )
        self.interruptions = Counter(
            P + "interruptions_total",
            "EC2 events read from the interruption queue, by pool and kind"
            " (spot_interruption, rebalance_recommendation, spot_terminated, terminated;"
            " pool 'unmanaged' or kind 'not_ec2' for messages that are not ours).",
            ["pool", "kind"],
            registry=r,
        )
        self.interruption_queue_errors = Counter(
            P + "interruption_queue_errors_total",
            "Failed reads or deletes of the interruption queue, by operation and error kind.",
            ["operation", "kind"],
            registry=r,
        )
