"""The GitHub webhooks' metrics: deliveries, reconciles, redeliveries, reaction time.

Set by observe/github's webhook receiver and its reconcile; exported only
when webhooks are configured. Split out of telemetry.py unchanged.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from autoscaler.metric_groups.common import P


class WebhookMetrics:
    """GitHub ``workflow_job`` webhooks."""

    def _register_webhooks(self, r: CollectorRegistry) -> None:
        """GitHub ``workflow_job`` webhooks; exported only when configured."""
        self.webhook_events = Counter(
            P + "webhook_events_total",
            "Webhook deliveries by event, action and result (accepted, duplicate, stale, "
            "bad_signature, ignored, too_large, invalid, queue_full, store_error).",
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
            "(record: the delivery was answered 503; load, reconcile, watch) and error code.",
            ["operation", "code"],
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
