"""The org webhook's delivery log over HTTP: read it back to a time, redeliver one attempt.

``GET /orgs/{org}/hooks/{hook_id}/deliveries`` (GitHub's OpenAPI description:
``orgs/list-webhook-deliveries``) pages with a ``cursor`` that only the ``Link`` header
carries, newest attempt first, ``per_page`` up to 100; ``POST
/orgs/{org}/hooks/{hook_id}/deliveries/{delivery_id}/attempts`` (``orgs/redeliver-webhook-
delivery``) answers 202 and makes the attempt later. Both need an org owner's token with
``admin:org_hook`` (a GitHub App: the *Webhooks* organization permission); both count
against the primary rate limit.

A read stops at the first page that reaches back past ``since``, at the log's end, at a
``Link`` back to a page already read (a loop) or after :data:`~.delivery_log.MAX_PAGES`
pages; the last two leave it incomplete (counted in
``github_pagination_errors_total{endpoint="hook_deliveries"}``). A malformed item is
skipped and counted (``github_skipped_items_total{kind="hook_delivery"}``); a page that is
not a JSON array ends the read, incomplete (``kind="hook_deliveries_page"``). Errors are the
helper's typed ones (:class:`~autoscaler.errors.AuthenticationError` for 401/403,
:class:`~autoscaler.errors.NotFoundError` for 404, transient and rate-limit errors).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from urllib.parse import quote

from autoscaler.observe.github.delivery_log import (
    MAX_PAGES,
    Attempt,
    parse_attempt,
    read_enough,
)
from autoscaler.observe.github.http import GitHubHttp
from autoscaler.observe.github.listing import page_key
from autoscaler.observe.github.parse import BadItem, BadPage, Skips, items
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github.deliveries")

LIST_ENDPOINT = "hook_deliveries"
REDELIVER_ENDPOINT = "hook_redeliver"


@dataclass
class LogRead:
    """What one read of the log returned."""

    attempts: list[Attempt] = field(default_factory=list)
    complete: bool = False
    """It reached ``since`` or the end of the log."""
    skipped: int = 0
    """Items (or a page) that could not be parsed."""
    pages: int = 0
    cut: str | None = None
    """Why it stopped early: ``loop``, ``page_cap`` or ``bad_page``."""


class DeliveryLog:
    """The delivery log of one organization webhook, through the poll's HTTP helper (its
    rate-limit gate, retries, clock and credentials)."""

    def __init__(
        self,
        http: GitHubHttp,
        owner: str,
        hook_id: int,
        metrics: Metrics,
        skips: Skips,
        *,
        max_pages: int = MAX_PAGES,
    ) -> None:
        self.http = http
        self.path = f"/orgs/{quote(owner, safe='')}/hooks/{hook_id}/deliveries"
        self.metrics = metrics
        self.skips = skips
        self.max_pages = max_pages

    def __repr__(self) -> str:
        return f"DeliveryLog({self.path!r})"

    def read(self, since: float | None, deadline: float | None = None) -> LogRead:
        """The attempts from the newest back to (at least) ``since`` (None: one page)."""
        out = LogRead()
        seen: set[str] = set()
        url: str | None = self.http.url(f"{self.path}?per_page=100")
        while url is not None:
            key = page_key(url)
            if key in seen or out.pages >= self.max_pages:
                out.cut = "loop" if key in seen else "page_cap"
                self.metrics.github_pagination_errors.labels(LIST_ENDPOINT, out.cut).inc()
                log.error(
                    "GitHub webhook delivery log: %s after %d pages, stopped before %s",
                    "a Link back to a page already read"
                    if out.cut == "loop"
                    else "more pages than the cap",
                    out.pages,
                    url,
                )
                return out
            seen.add(key)
            answer = self.http.send("GET", url, LIST_ENDPOINT, deadline=deadline)
            out.pages += 1
            try:
                found, _ = items(answer.content, "hook_deliveries")
            except BadPage:
                out.skipped += 1
                out.cut = "bad_page"
                self.skips.skip("hook_deliveries_page", "not a JSON array")
                return out
            page: list[Attempt] = []
            for item in found:
                try:
                    if isinstance(item, BadItem):
                        raise item
                    page.append(parse_attempt(item))
                except BadItem as exc:
                    out.skipped += 1
                    self.skips.skip("hook_delivery", str(exc))
            out.attempts += page
            if since is None or read_enough(page, since):
                out.complete = True
                return out
            nxt = self.http.next_url(answer.headers.get("link"))
            url = None if nxt is None else self.http.url(nxt)
        out.complete = True  # the log's end
        return out

    def redeliver(self, delivery_id: int, deadline: float | None = None) -> None:
        """Ask GitHub to attempt this delivery again (202: it will, later)."""
        self.http.send(
            "POST", f"{self.path}/{delivery_id}/attempts", REDELIVER_ENDPOINT, deadline=deadline
        )
