"""The loop's own metrics: the queue it sees, job starts against their objectives, its
polls, ticks and status server.

These are the numbers an operator watches the controller by (is the queue served, is
the loop alive); they move with the controller's Reporter port in autoscaler.telemetry,
which sets them. Split out of telemetry.py when it passed 500 lines; names, help text,
labels and registration order are unchanged.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from autoscaler.metric_groups.common import FAST, P

#: Queue times: seconds to hours (an objective is usually a few minutes).
_QUEUE = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0)


class LoopMetrics:
    """The queue picture, job start objectives, polls, ticks and the status server."""

    def _register_loop(self, r: CollectorRegistry) -> None:
        """The queue, then the status server (/metrics, /readyz)."""
        self.queue_size = Gauge(
            P + "queue_size", "Fresh queued jobs per runner type.", ["runner_type"], registry=r
        )
        self.queue_max_age = Gauge(
            P + "queue_max_age_seconds",
            "Queue time of the oldest fresh queued job per runner type.",
            ["runner_type"],
            registry=r,
        )
        self.runners = Gauge(
            P + "runners", "Registered runners by state.", ["runner_type", "state"], registry=r
        )
        self.unmatched_jobs = Gauge(
            P + "unmatched_jobs", "Queued jobs whose labels no runner type serves.", registry=r
        )
        self.unmatched_max_age = Gauge(
            P + "unmatched_max_age_seconds", "Queue time of the oldest unmatched job.", registry=r
        )
        self.ghost_jobs = Gauge(
            P + "ghost_jobs",
            "Jobs GitHub still marks queued that will never run (steps present or run done).",
            registry=r,
        )
        self.last_successful_poll = Gauge(
            P + "last_successful_poll_timestamp_seconds",
            "Unix time of the last complete poll of the CI provider.",
            registry=r,
        )
        self.polls = Counter(
            P + "polls_total", "Polls of the CI provider by result.", ["result"], registry=r
        )
        self.stage_failures = Counter(
            P + "stage_failures_total",
            "Tick stages (alerting, scaling) that failed unexpectedly; the loop went on.",
            ["stage"],
            registry=r,
        )
        self.job_queue_seconds = Histogram(
            P + "job_queue_seconds",
            "Queue time of each job when it started (started_at - created_at), once per job.",
            ["runner_type"],
            buckets=_QUEUE,
            registry=r,
        )
        self.jobs_within_objective = Counter(
            P + "jobs_within_queue_time_objective_total",
            "Jobs that started within their runner type's slo.queue_time (the good events;"
            " job_queue_seconds_count are all events).",
            ["runner_type"],
            registry=r,
        )
        self.queue_time_objective = Gauge(
            P + "queue_time_objective_seconds",
            "A runner type's slo.queue_time.",
            ["runner_type"],
            registry=r,
        )
        self.queue_time_objective_ratio = Gauge(
            P + "queue_time_objective_ratio",
            "A runner type's slo.objective: the share of jobs that must start within queue_time.",
            ["runner_type"],
            registry=r,
        )
        self.queue_time_attained = Gauge(
            P + "queue_time_objective_attained_ratio",
            "Share of the last hour's started jobs that started within slo.queue_time"
            " (NaN: none started).",
            ["runner_type"],
            registry=r,
        )
        self.tick_duration = Histogram(
            P + "tick_duration_seconds",
            "Wall time of one reconcile tick.",
            buckets=FAST,
            registry=r,
        )

        # --- the status server (/metrics, /healthz, /readyz)
        self.http_connections_open = Gauge(
            P + "http_connections_open",
            "Connections open to the status server.",
            registry=r,
        )
        self.http_connections_dropped = Counter(
            P + "http_connections_dropped_total",
            "Status server connections closed early, by reason: header_timeout (no whole "
            "request in time), evicted (closed at the connection limit to make room), "
            "over_limit, too_large, bad_request, write_timeout (the client did not read).",
            ["reason"],
            registry=r,
        )
