"""Every metric the controller exports, defined once on an injected registry.

Names follow Prometheus conventions: prefix ``ci_autoscaler_``, base units, counters end
in ``_total``. Labels are bounded by the configuration (runner types, pools, receivers,
rules) or by code (operation, status, result); never a job id or a repository list.

One :class:`Metrics` object holds every metric; callers use ``metrics.<name>``. The
constructor registers them stage by stage, in the order /metrics lists them. Adapters
only: this imports prometheus_client, the pure core never imports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from autoscaler import __version__
from autoscaler.domain import JobStart, JobWait, QueueSnapshot

#: Every metric's name starts with this (Prometheus convention: one namespace per exporter).
P = "ci_autoscaler_"
#: Latencies of calls and ticks: milliseconds to half a minute.
FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Queue times: seconds to hours (an objective is usually a few minutes).
_QUEUE = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0)
#: One stage of a job's wait: a second (a webhook, a decision) to several minutes (a boot).
_STAGE = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 1800.0)
#: Capacity asked -> runner online: an instance boots in one to a few minutes.
_PROVISION = (30.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0, 900.0, 1800.0, 3600.0)


class _Objective(Protocol):
    @property
    def queue_time(self) -> float: ...

    @property
    def objective(self) -> float: ...


class ObjectiveShare(Protocol):
    """What the metrics read of a runner type's queue-time objective
    (:class:`autoscaler.observe.starts.ObjectiveStatus`)."""

    @property
    def objective(self) -> _Objective: ...

    def share(self, window: float) -> float | None: ...


class Metrics:
    """The metric objects, registered on ``registry`` (a fresh one per test)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        Info(P + "build", "Build information.", registry=r).info({"version": __version__})

        # --- the loop: the queue, polls, ticks
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
        self.job_wait_stage_seconds = Histogram(
            P + "job_wait_stage_seconds",
            "Where the queue time of jobs started on runners this controller asked for went,"
            " by stage: github_lag (created -> first seen), decision (-> capacity asked),"
            " launch (-> instance running), boot (-> runner online), assignment (-> started).",
            ["runner_type", "stage"],
            buckets=_STAGE,
            registry=r,
        )
        self.tick_duration = Histogram(
            P + "tick_duration_seconds",
            "Wall time of one reconcile tick.",
            buckets=FAST,
            registry=r,
        )
        self.tick_overruns = Counter(
            P + "tick_overruns_total",
            "Ticks that took longer than the poll interval (the next one started at once; "
            "ticks never overlap).",
            registry=r,
        )
        self.github_polls_cut = Counter(
            P + "github_polls_cut_total",
            "GitHub polls that ended before every listing they asked for was in, by cause "
            "(deadline: the poll's share of the interval passed; rate_limited). Listings "
            "not reached keep their last answer.",
            ["cause"],
            registry=r,
        )

        # --- the served application (the status and webhook listeners)
        self.http_connections_open = Gauge(
            P + "http_connections_open",
            "Connections open to the status listener (/metrics, /healthz, /readyz, /).",
            registry=r,
        )
        self.http_connections_dropped = Counter(
            P + "http_connections_dropped_total",
            "Connections closed early, by reason: header_timeout (no whole request head "
            "in time), body_timeout, evicted (closed at the connection limit to make "
            "room), over_limit, too_large, bad_request, write_timeout (the client did not "
            "read); the webhook listener's reasons start with webhook_.",
            ["reason"],
            registry=r,
        )

        # --- the GitHub adapter: requests, rate limits, the poll's budget, listings
        self.github_requests = Counter(
            P + "github_requests_total",
            "GitHub API requests by endpoint kind and HTTP status (or 'error').",
            ["endpoint", "status"],
            registry=r,
        )
        self.github_request_duration = Histogram(
            P + "github_request_duration_seconds",
            "GitHub API request latency by endpoint kind.",
            ["endpoint"],
            buckets=FAST,
            registry=r,
        )
        self.github_rate_limit_remaining = Gauge(
            P + "github_rate_limit_remaining",
            "x-ratelimit-remaining of the last response, by resource.",
            ["resource"],
            registry=r,
        )
        self.github_rate_limit_limit = Gauge(
            P + "github_rate_limit_limit",
            "x-ratelimit-limit, by resource.",
            ["resource"],
            registry=r,
        )
        self.github_rate_limit_reset = Gauge(
            P + "github_rate_limit_reset_timestamp_seconds",
            "x-ratelimit-reset (unix time), by resource.",
            ["resource"],
            registry=r,
        )
        self.github_poll_interval = Gauge(
            P + "github_poll_interval_seconds",
            "Effective seconds between re-lists of repositories and runs with queued jobs "
            "(activity=busy) and of quiet repositories' newest runs (quiet; polling alone) or "
            "of every other unit (quiet; as the webhook reconcile), as the budget plans them.",
            ["activity"],
            registry=r,
        )
        self.github_staleness_limit = Gauge(
            P + "github_staleness_limit_seconds",
            "Polling alone: the longest a repository's runs or a run's jobs go without being "
            "listed again (stretched, like the quiet interval, when the budget is short).",
            registry=r,
        )
        self.github_repos = Gauge(
            P + "github_repos",
            "Watched repositories by activity: live (a run not completed at the last listing: "
            "listed whole every tick) and quiet (listed by their newest runs, less often).",
            ["activity"],
            registry=r,
        )
        self.github_listings = Counter(
            P + "github_listings_total",
            "Listings the poll asked for, by listing (runs: a repository's runs in every "
            "status that can hold a queued job; recent_runs: its newest runs in any status; "
            "all_runs: its runs in any status, read to the end, when they fit a few pages; "
            "jobs: a run's jobs) and reason (new, live, quiet, stale, short, busy, status, "
            "runner; reconcile: the webhook reconcile lists them all).",
            ["listing", "reason"],
            registry=r,
        )
        self.github_budget = Gauge(
            P + "github_budget_requests_per_hour",
            "Requests per hour counted against the primary rate limit the poll plans with "
            "(github.rate_limit_share of x-ratelimit-limit, and what the window has left).",
            registry=r,
        )
        self.github_budget_needed = Gauge(
            P + "github_budget_needed_requests_per_hour",
            "What the poll's listings would cost per hour unstretched: every unit at its own "
            "interval (busy and live ones every poll interval).",
            registry=r,
        )
        self.github_rate_limit_pauses = Counter(
            P + "github_rate_limit_pauses_total",
            "Rate-limit answers that paused every GitHub request, by kind (primary, secondary).",
            ["kind"],
            registry=r,
        )
        self.github_deferred_listings = Counter(
            P + "github_deferred_listings_total",
            "Re-lists of busy or quiet repositories and runs deferred to a later tick "
            "because the tick's share of the rate-limit budget was spent.",
            ["activity"],
            registry=r,
        )
        self.github_truncated_listings = Counter(
            P + "github_truncated_listings_total",
            "Run listings GitHub capped (1,000 runs for a status filter); each was narrowed "
            "by created ranges.",
            registry=r,
        )
        self.github_pagination_errors = Counter(
            P + "github_pagination_errors_total",
            "Listings stopped because a Link led back to a page already read (loop) or past "
            "the page cap (page_cap), by listing.",
            ["endpoint", "reason"],
            registry=r,
        )
        self.github_unlisted_repos = Gauge(
            P + "github_unlisted_repos",
            "Watched repositories whose runs were never listed yet (no picture of them).",
            registry=r,
        )
        self.github_cache_entries = Gauge(
            P + "github_cache_entries",
            "Pages in the ETag cache (compact records; persisted in the state store).",
            registry=r,
        )
        self.github_skipped_items = Counter(
            P + "github_skipped_items_total",
            "Items skipped because GitHub returned malformed data for them.",
            ["kind"],
            registry=r,
        )

        # --- alerts: firing, transitions, notification attempts
        self.alerts_firing = Gauge(
            P + "alerts_firing",
            "Alerts currently firing, by rule.",
            ["rule", "priority"],
            registry=r,
        )
        self.alert_transitions = Counter(
            P + "alert_transitions_total",
            "Alert state transitions.",
            ["rule", "state"],
            registry=r,
        )
        self.alert_notifications = Counter(
            P + "alert_notifications_total",
            "Notification attempts by receiver and result (sent, failed, retried).",
            ["receiver", "result"],
            registry=r,
        )

        # --- the state store and the leader lease
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

        # --- Alertmanager posts and notifications still to deliver
        self.alertmanager_posts = Counter(
            P + "alertmanager_posts_total",
            "Posts of the firing and resolved alerts to an Alertmanager (every URL of an "
            "alertmanager receiver), by result (sent, failed, rejected).",
            ["receiver", "result"],
            registry=r,
        )
        self.alert_notifications_pending = Gauge(
            P + "alert_notifications_pending",
            "Notifications not yet delivered (retried next tick).",
            ["receiver"],
            registry=r,
        )

        # --- pools and scaling
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
        self.warm_pool_instances = Gauge(
            P + "warm_pool_instances",
            "Instances in a pool's warm pool by state (pending, stopped, hibernated, running,"
            " terminating, other); pools listed under pools: only.",
            ["runner_type", "pool", "state"],
            registry=r,
        )
        self.warm_pool_min_size = Gauge(
            P + "warm_pool_min_size",
            "A pool's configured warm_pool.min_size (0: no warm pool).",
            ["runner_type", "pool"],
            registry=r,
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
            " (registered) or took a job (busy), GitHub could not be asked (lookup_failed),"
            " their credential or runner could not be withdrawn (withdraw_failed), the"
            " registration token they took has not expired yet (token_live), or the clocks"
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
        self.registration_tokens = Counter(
            P + "registration_tokens_total",
            "Runner registration tokens asked of GitHub for persistent instances, by result"
            " (created, forbidden, rate_limited, failed, handover_failed).",
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

        # --- GitHub workflow_job webhooks (exported only when configured)
        self.webhook_events = Counter(
            P + "webhook_events_total",
            "Webhook deliveries by event, action and result (accepted, duplicate, stale, "
            "bad_signature, ignored, too_large, invalid, queue_full, store_error; error: a "
            "fault of ours, answered 500).",
            ["event", "action", "result"],
            registry=r,
        )
        self.webhook_reconcile_corrections = Counter(
            P + "webhook_reconcile_corrections_total",
            "Jobs the reconcile poll found the webhooks had missed (missed), left behind "
            "(status) or not closed (gone).",
            ["kind"],
            registry=r,
        )
        self.webhook_last_event = Gauge(
            P + "webhook_last_event_timestamp_seconds",
            "Unix time of the last verified workflow_job delivery applied.",
            registry=r,
        )
        self.webhook_store_errors = Counter(
            P + "webhook_store_errors_total",
            "Webhook job index operations on the state store that failed, by operation "
            "(record: the delivery was answered 503; load, prune, reconcile, watch) and error "
            "code.",
            ["operation", "code"],
            registry=r,
        )
        self.webhook_index_reads = Counter(
            P + "webhook_index_reads_total",
            "Whole reads of the stored webhook job index, by reason (start; takeover: this "
            "controller began to act; lost: rows accepted since the last read were lost to "
            "this reader). Between them the index in memory follows the accepted rows.",
            ["reason"],
            registry=r,
        )
        self.webhook_reconciles = Counter(
            P + "webhook_reconciles_total",
            "Full polls run as the webhooks' reconcile, by reason (interval, silent, start).",
            ["reason"],
            registry=r,
        )
        self.webhook_reconcile_job_listings = Counter(
            P + "webhook_reconcile_job_listings_total",
            "Known runs at a webhook reconcile, by whether (and why) their jobs were "
            "listed again (new, stale, status, event, queued, runner; settled: not listed).",
            ["reason"],
            registry=r,
        )
        self.webhook_redeliveries = Counter(
            P + "webhook_redeliveries_total",
            "Failed workflow_job deliveries found in the webhook's delivery log (webhook."
            "hook_id), by result: requested (GitHub accepted the redelivery), error (the "
            "request failed; tried again next reconcile), postponed (over the per-reconcile "
            "cap), permanent (an answer a redelivery cannot change: not redelivered), gave_up "
            "(failed again after 3 redeliveries).",
            ["result"],
            registry=r,
        )
        self.webhook_delivery_log_reads = Counter(
            P + "webhook_delivery_log_reads_total",
            "Reads of the webhook's delivery log at reconciles, by result: clean (no "
            "delivery lost since the previous read: the reconcile lists only the runners), "
            "lost (one was: the lean reconcile), incomplete (a page cap, a Link loop or a "
            "malformed page), first (nothing to compare with yet), forbidden, not_found, "
            "error (the log unreadable: the lean reconcile).",
            ["result"],
            registry=r,
        )
        self.reaction_seconds = Histogram(
            P + "reaction_seconds",
            "From a job's queued webhook to the capacity request it caused.",
            buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0, 10.0, 30.0, 60.0),
            registry=r,
        )

        # --- job retries, interruption events, the interruption queue's errors
        self.job_retries = Counter(
            P + "job_retries_total",
            "Failed and cancelled jobs judged by the job-retry stage, by runner type, reason"
            " (the classifier's evidence: spot_interruption, runner_lost, user,"
            " cancelled_by_loss, ...) and result (their run's: rerun, skip, already, outage,"
            " exhausted, denied, deferred, failed).",
            ["runner_type", "reason", "result"],
            registry=r,
        )
        self.job_retry_runs = Counter(
            P + "job_retry_runs_total",
            "Completed workflow run attempts with a failed or cancelled job, decided by the"
            " job-retry stage, by verdict (lost: every failure lost to infrastructure and"
            " every cancel caused by the loss; own_failure, cancelled_before_loss,"
            " nothing_lost) and result (rerun: one rerun-failed-jobs; skip, already,"
            " outage, exhausted, denied, deferred, failed).",
            ["verdict", "result"],
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

    # --- the controller's Reporter port
    def poll_succeeded(self, snapshot: QueueSnapshot, now: datetime) -> None:
        self.polls.labels("ok").inc()
        report_queue(self, snapshot, now)

    def jobs_started(
        self, starts: Sequence[JobStart], objectives: Mapping[str, ObjectiveShare]
    ) -> None:
        """Each newly started job's queue time; each objective's share over the last hour."""
        for start in starts:
            self.job_queue_seconds.labels(start.runner_type).observe(start.queue_seconds)
            if start.within_objective:
                self.jobs_within_objective.labels(start.runner_type).inc()
        for name, status in objectives.items():
            self.queue_time_objective.labels(name).set(status.objective.queue_time)
            self.queue_time_objective_ratio.labels(name).set(status.objective.objective)
            self.job_queue_seconds.labels(name)  # exported at 0 before the first job
            self.jobs_within_objective.labels(name)
            share = status.share(3600.0)
            self.queue_time_attained.labels(name).set(math.nan if share is None else share)

    def job_waits(self, waits: Sequence[JobWait]) -> None:
        """Each started job's wait, stage by stage."""
        for w in waits:
            for stage, seconds in w.by_stage().items():
                self.job_wait_stage_seconds.labels(w.runner_type, stage).observe(seconds)

    def poll_failed(self, kind: str) -> None:
        self.polls.labels(kind).inc()

    def stage_failed(self, stage: str) -> None:
        self.stage_failures.labels(stage).inc()

    def tick_finished(self, seconds: float) -> None:
        self.tick_duration.observe(seconds)

    def tick_overran(self) -> None:
        self.tick_overruns.inc()


def report_queue(metrics: Metrics, snapshot: QueueSnapshot, now: datetime) -> None:
    """Export one successful poll's queue picture."""
    for name, stats in snapshot.per_type.items():
        metrics.queue_size.labels(name).set(stats.queue_size)
        metrics.queue_max_age.labels(name).set(stats.max_queue_time_seconds)
        metrics.runners.labels(name, "idle").set(stats.runners.idle)
        metrics.runners.labels(name, "busy").set(stats.runners.busy)
        metrics.runners.labels(name, "offline").set(stats.runners.offline)
    metrics.unmatched_jobs.set(snapshot.unmatched_jobs)
    metrics.unmatched_max_age.set(
        snapshot.unmatched_ages_seconds[0] if snapshot.unmatched_ages_seconds else 0.0
    )
    metrics.ghost_jobs.set(snapshot.ghost_jobs)
    metrics.last_successful_poll.set(now.timestamp())
