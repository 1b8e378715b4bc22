"""Paged listings: follow ``Link: rel="next"`` safely, and narrow capped run listings.

- **A page already seen** (a ``next`` link back to a page of the same listing) and **more
  than** :data:`MAX_PAGES` **pages** both end the listing with :class:`PaginationError`,
  the URL in the message: a broken ``Link`` once looped 82,000 requests in 15 s.
- **A repository's newest runs** (:func:`list_recent`): the runs listing without a
  ``status``, newest first whatever their status, read page by page only down to a
  given creation time: one answer standing for every status, for the runs created since.
- **Capped run listings**: GitHub returns at most :data:`RUN_LISTING_CAP` runs for a
  listing filtered by ``status`` (its OpenAPI description: "up to 1,000 results for each
  search"), while ``total_count`` counts them all. When ``total_count`` is over the cap,
  the listing is counted in ``github_truncated_listings_total`` and narrowed: runs come
  newest first, so the next listing asks for ``created=<=<oldest run seen>``, and so on,
  up to :data:`MAX_NARROWING` times. Runs are deduplicated by id (pages shift while a
  listing is read: a run created meanwhile pushes others to the next page).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from autoscaler.observe.github.http import GitHubHttp
from autoscaler.observe.github.parse import BadPage
from autoscaler.observe.github.records import PageRecord, RunRef
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")

#: Pages one listing may take (20,000 items at 100 a page) before it is an error.
MAX_PAGES = 200
#: What GitHub returns at most for a status-filtered runs listing (the client does not
#: rely on the number: a listing whose total_count exceeds what it returned is capped).
RUN_LISTING_CAP = 1000
#: ``created`` narrowings of one capped listing (up to 11,000 runs of one status).
MAX_NARROWING = 10
PER_PAGE = 100


class PaginationError(BadPage):
    """A listing's pages loop, or there are more than MAX_PAGES of them."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        #: ``loop`` or ``page_cap`` (a bounded metric label).
        self.reason = reason


@dataclass
class Listed:
    """Every page of one listing."""

    records: list[PageRecord] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    counted: int = 0
    """Pages that cost a request of the primary rate limit (not 304)."""

    @property
    def items(self) -> list[Any]:
        return [item for record in self.records for item in record.items]

    @property
    def total_count(self) -> int | None:
        return self.records[0].total_count if self.records else None

    def extend(self, other: Listed) -> None:
        self.records += other.records
        self.urls += other.urls
        self.counted += other.counted


def with_per_page(path: str) -> str:
    return f"{path}{'&' if '?' in path else '?'}per_page={PER_PAGE}"


def page_key(url: str) -> str:
    """A URL's identity for loop detection: path and sorted query (no ``page`` is page 1)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.setdefault("page", "1")
    return f"{parts.path}?{urlencode(sorted(query.items()))}"


def list_pages(
    http: GitHubHttp,
    path: str,
    endpoint: str,
    compact: Callable[[Any], PageRecord],
    deadline: float,
    *,
    max_pages: int = MAX_PAGES,
) -> Listed:
    """Every page of a listing, first page ``path`` (``per_page=100`` added)."""
    listed = Listed()
    seen: set[str] = set()
    url: str | None = http.url(with_per_page(path))
    while url is not None:
        if listed.urls:  # a next page: (most listings have one page, and need no key)
            if not seen:
                seen.add(page_key(listed.urls[0]))
            key = page_key(url)
            if key in seen:
                raise PaginationError(
                    f"{endpoint}: Link rel=next points back to a page already read: {url}",
                    "loop",
                )
            if len(listed.records) >= max_pages:
                raise PaginationError(
                    f"{endpoint}: more than {max_pages} pages, stopped before {url}",
                    "page_cap",
                )
            seen.add(key)
        page = http.get_page(url, endpoint, compact, deadline)
        listed.records.append(page.record)
        listed.urls.append(url)
        listed.counted += page.counted
        url = None if page.next_url is None else http.url(page.next_url)
    return listed


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def list_runs(  # noqa: PLR0917
    http: GitHubHttp,
    metrics: Metrics,
    owner: str,
    repo: str,
    status: str,
    compact: Callable[[Any], PageRecord],
    deadline: float,
) -> tuple[list[RunRef], Listed]:
    """The runs of ``repo`` GitHub reports with ``status`` (deduplicated), narrowing a
    capped listing by ``created`` ranges; and every page read."""
    path = f"/repos/{owner}/{quote(repo, safe='')}/actions/runs?status={status}"
    listed = list_pages(http, path, "runs", compact, deadline)
    runs: dict[int, RunRef] = {}
    for run in listed.items:
        runs.setdefault(run.id, run)
    round_items = listed.items
    if not _capped(listed.total_count, round_items):
        return list(runs.values()), listed
    metrics.github_truncated_listings.inc()
    log.info(
        "GitHub capped %s at %d of %d runs; narrowing by created",
        http.url(path),
        len(round_items),
        listed.total_count,
    )
    for _ in range(MAX_NARROWING):
        oldest = min(run.created_at for run in round_items)
        more = list_pages(
            http, f"{path}&created={quote('<=' + _iso(oldest))}", "runs", compact, deadline
        )
        listed.extend(more)
        new = [run for run in more.items if run.id not in runs]
        for run in new:
            runs[run.id] = run
        if not _capped(more.total_count, more.items):
            return list(runs.values()), listed
        if not new:
            break
        round_items = more.items
    log.error(
        "GitHub %s: still capped after narrowing by created (%d narrowings at most, or "
        "too many runs created in one second); the oldest runs are not seen",
        http.url(path),
        MAX_NARROWING,
    )
    return list(runs.values()), listed


def _capped(total: int | None, items: list[Any]) -> bool:
    """GitHub counted more runs than it returned (a listing capped at 1,000 runs)."""
    return total is not None and total > len(items) and bool(items)


def list_recent(  # noqa: PLR0917
    http: GitHubHttp,
    owner: str,
    repo: str,
    compact: Callable[[Any], PageRecord],
    deadline: float,
    since: float | None,
    *,
    per_page: int,
    max_pages: int,
) -> tuple[list[RunRef], Listed, bool, bool]:
    """The newest runs of ``repo`` in every status, pages read until one shows a run
    created before ``since`` (unix time, GitHub's clock) or the listing ends; whether
    that happened within ``max_pages`` (False: runs created since may be missing; with
    ``since`` None, only the first page is read); and whether the listing ended (its
    last page has no ``next``): then it holds every run of the repository, in every
    status, and stands for a whole listing."""
    path = f"/repos/{owner}/{quote(repo, safe='')}/actions/runs?per_page={per_page}"
    listed = Listed()
    runs: dict[int, RunRef] = {}
    url: str | None = http.url(path)
    seen: set[str] = set()
    while url is not None:
        key = page_key(url)
        if key in seen:
            raise PaginationError(
                f"runs: Link rel=next points back to a page already read: {url}", "loop"
            )
        seen.add(key)
        page = http.get_page(url, "runs", compact, deadline)
        listed.records.append(page.record)
        listed.urls.append(url)
        listed.counted += page.counted
        items: tuple[RunRef, ...] = page.record.items
        for run in items:
            runs.setdefault(run.id, run)
        if page.next_url is None:
            return list(runs.values()), listed, True, True
        if since is not None and any(run.created_at < since for run in items):
            return list(runs.values()), listed, True, False
        if since is None or len(listed.records) >= max_pages:
            return list(runs.values()), listed, False, False
        url = http.url(page.next_url)
    return list(runs.values()), listed, True, True
