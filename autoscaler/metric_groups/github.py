"""The GitHub adapter's metrics: requests, rate limits and the poll's budget, listings.

Set by observe/github (http, ratelimit gate, budget planner, listing, parse); kept apart
from the loop's metrics because they explain *why* a poll was slow or partial, not what
it saw. Split out of telemetry.py unchanged (names, help, labels, order).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from autoscaler.metric_groups.common import FAST, P


class GitHubMetrics:
    """GitHub API requests, rate limits, the poll's budget and its listings."""

    def _register_github(self, r: CollectorRegistry) -> None:
        """The GitHub adapter (polling); the webhooks' metrics are in metric_groups.webhooks."""
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
            "(activity=busy) and of the others (quiet), as the rate-limit budget plans them.",
            ["activity"],
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
            "What re-listing everything every poll interval would cost per hour.",
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
