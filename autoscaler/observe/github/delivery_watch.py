"""The webhook's delivery log at each reconcile: redeliver what failed, tell a clean window.

:class:`DeliveryWatch` keeps what one read needs from the previous one (when it was, and
the attempt ids already judged), reads the log back to the newest attempt the previous
read saw (minus
:data:`~.delivery_log.MARGIN_SECONDS`), lets :func:`~.delivery_log.review` decide, asks
GitHub to redeliver each failed ``workflow_job`` delivery (the acting controller only:
two controllers would ask twice) and answers whether the window was *clean*: then the
reconcile may skip what it lists only in case a delivery was lost.

The log unreadable (403: the credentials lack the permission; 404: a wrong
``webhook.hook_id``; any other error) makes the reconcile the lean one, as without
``hook_id``: said once in the log (a 403 names the permission) until a read works again,
and counted every time (``webhook_delivery_log_reads_total{result}``). The next good read
after a bad one judges no window (``first``): what happened in between is unknown.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from autoscaler.errors import AuthenticationError, AutoscalerError, NotFoundError
from autoscaler.observe.github.delivery_log import (
    MARGIN_SECONDS,
    MAX_REDELIVERIES,
    Attempt,
    review,
)
from autoscaler.observe.github.delivery_reader import LogRead
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github.deliveries")

#: Seconds one read (and its redeliveries) may wait on GitHub's rate-limit gate.
READ_WAIT = 20.0
#: Redeliveries of one event at most (a receiver that keeps failing it is not retried
#: forever; the reconcile's listings cover what it said).
MAX_TRIES = 3

#: A 403's log line: what the credentials need (GitHub's description of the endpoint).
PERMISSION = (
    "the token needs the admin:org_hook scope (classic token; an org owner's), a GitHub "
    'App the "Webhooks" organization permission (read and write)'
)


class DeliveryLogPort(Protocol):
    """The delivery log as the watch uses it (:class:`~.delivery_reader.DeliveryLog`)."""

    def read(self, since: float | None, deadline: float | None = None) -> LogRead: ...

    def redeliver(self, delivery_id: int, deadline: float | None = None) -> None: ...


#: Answers a redelivery cannot change, with what usually causes them (for the log line).
_CAUSES = {
    400: "a payload the listener refuses as malformed",
    401: "the webhook's secret differs from webhook.secret",
    413: "larger than webhook.max_body_bytes",
    422: "a workflow_job action the listener does not know",
}


class DeliveryWatch:
    """Reads the log at each reconcile; redelivers; says whether nothing was lost."""

    def __init__(
        self,
        delivery_log: DeliveryLogPort,
        metrics: Metrics,
        *,
        first_window: float,
        max_redeliveries: int = MAX_REDELIVERIES,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = delivery_log
        self.metrics = metrics
        self.first_window = first_window
        """Seconds a first read looks back (failures older than that are not redelivered:
        the reconcile that follows lists the truth)."""
        self.max_redeliveries = max_redeliveries
        self._monotonic = monotonic
        self.horizon: float | None = None
        """How far the log has been read, on the log's own clock: the newest
        ``delivered_at`` seen (None: no good read yet, or the last one failed). The next
        read goes back to it minus :data:`~.delivery_log.MARGIN_SECONDS`, so a clock
        skew between GitHub and this host cannot open a gap."""
        self._judged: dict[int, float] = {}
        #: ``delivered_at`` of the oldest failed attempt left for the next read (over the
        #: cap, or its redelivery request failed): the next read goes back to it.
        self._waiting: float | None = None
        #: Redeliveries requested per event (guid), forgotten with the judged attempts.
        self._tries: dict[str, int] = {}
        self._unusable: str | None = None

    def __repr__(self) -> str:
        return f"DeliveryWatch({self.log!r})"

    def check(self, now: datetime, *, redeliver: bool = True) -> bool:
        """Read, redeliver (``redeliver``: this controller acts), judge; True: clean."""
        wall = now.timestamp()
        first = self.horizon is None
        since = wall - self.first_window if self.horizon is None else self.horizon - MARGIN_SECONDS
        if self._waiting is not None and self.horizon is not None:
            since = min(since, self._waiting)  # back to the oldest event still to redeliver
        deadline = self._monotonic() + READ_WAIT
        try:
            read = self.log.read(since, deadline)
        except AutoscalerError as exc:
            self._failed(exc)
            return False
        if self._unusable is not None:
            log.info("webhook delivery log readable again (was: %s)", self._unusable)
            self._unusable = None
        verdict = review(
            read.attempts,
            judged=self._judged,
            since=since,
            complete=read.complete,
            skipped=read.skipped,
            max_redeliveries=self.max_redeliveries,
        )
        chosen = tuple(a for a in verdict.redeliver if self._tries.get(a.guid, 0) < MAX_TRIES)
        if len(chosen) < len(verdict.redeliver):
            given_up = len(verdict.redeliver) - len(chosen)
            self.metrics.webhook_redeliveries.labels("gave_up").inc(given_up)
            log.warning(
                "webhook delivery log: %d workflow_job deliveries failed again after %d "
                "redeliveries; not redelivered again (the reconcile lists around them)",
                given_up,
                MAX_TRIES,
            )
        retry_later = {a.guid for a in chosen} if not redeliver else set()
        retry_later |= self._redeliver(chosen, deadline) if redeliver else set()
        if verdict.postponed:
            self.metrics.webhook_redeliveries.labels("postponed").inc(len(verdict.postponed))
            log.warning(
                "webhook delivery log: %d failed deliveries over the cap of %d redeliveries "
                "a reconcile; the next reconcile redelivers them",
                len(verdict.postponed),
                self.max_redeliveries,
            )
            retry_later |= {a.guid for a in verdict.postponed}
        self._permanent(verdict.permanent)
        self._remember(read.attempts, since, retry_later)
        waiting = [a.delivered_at for a in read.attempts if a.guid in retry_later]
        # A read that could not reach back that far gives them up (the reconciles of
        # their windows listed around them): no read is stuck at the page cap for good.
        self._waiting = min(waiting) if waiting and read.complete else None
        # GitHub's clock: the newest attempt read. An empty log leaves the horizon where
        # it was; at a first read, ``since`` (our clock, first_window back: a skew of
        # less than that opens no gap).
        newest = max((a.delivered_at for a in read.attempts), default=since)
        self.horizon = newest if self.horizon is None else max(newest, self.horizon)
        result = (
            "first"
            if first
            else "incomplete"
            if not read.complete or read.skipped
            else "clean"
            if verdict.clean
            else "lost"
        )
        self.metrics.webhook_delivery_log_reads.labels(result).inc()
        if verdict.failed:
            log.info(
                "webhook delivery log: %d workflow_job deliveries failed since the last read "
                "(%d redeliveries asked, %d not redeliverable); this reconcile lists what "
                "they may hide",
                verdict.failed,
                len(chosen) if redeliver else 0,
                len(verdict.permanent),
            )
        elif result == "incomplete":
            log.warning(
                "webhook delivery log read incompletely (%s, %d items skipped): no evidence "
                "this window, the lean reconcile runs",
                read.cut or "malformed items",
                read.skipped,
            )
        return result == "clean"

    def _redeliver(self, attempts: tuple[Attempt, ...], deadline: float) -> set[str]:
        """Ask for each redelivery; the guids whose request failed (tried next time)."""
        failed: set[str] = set()
        for n, attempt in enumerate(attempts):
            try:
                self.log.redeliver(attempt.id, deadline)
            except AutoscalerError as exc:
                rest = attempts[n:]
                self.metrics.webhook_redeliveries.labels("error").inc(len(rest))
                failed |= {a.guid for a in rest}
                hint = f" ({PERMISSION})" if isinstance(exc, AuthenticationError) else ""
                log.warning(
                    "webhook redelivery of delivery %d failed: %s%s; %d left for the next "
                    "reconcile",
                    attempt.id,
                    exc,
                    hint,
                    len(rest),
                )
                return failed
            self.metrics.webhook_redeliveries.labels("requested").inc()
            self._tries[attempt.guid] = self._tries.get(attempt.guid, 0) + 1
            log.debug("webhook delivery %s (%s) redelivery requested", attempt.guid, attempt.id)
        return failed

    def _permanent(self, attempts: tuple[Attempt, ...]) -> None:
        if not attempts:
            return
        self.metrics.webhook_redeliveries.labels("permanent").inc(len(attempts))
        by_code: dict[int, int] = {}
        for attempt in attempts:
            by_code[attempt.status_code] = by_code.get(attempt.status_code, 0) + 1
        for code, count in sorted(by_code.items()):
            log.warning(
                "webhook delivery log: %d workflow_job deliveries answered %d (%s): a "
                "redelivery would get the same answer, not redelivered",
                count,
                code,
                _CAUSES.get(code, "refused by the listener or on the way"),
            )

    def _remember(self, attempts: list[Attempt], since: float, later: set[str]) -> None:
        """Mark this read's attempts judged (but those to judge again), forget old ones."""
        for attempt in attempts:
            if attempt.delivered_at >= since and attempt.guid not in later:
                self._judged[attempt.id] = attempt.delivered_at
        horizon = since - MARGIN_SECONDS
        self._judged = {i: at for i, at in self._judged.items() if at >= horizon}
        if len(self._tries) > 10 * self.max_redeliveries:  # bounded: oldest first out
            self._tries = dict(list(self._tries.items())[-5 * self.max_redeliveries :])

    def _failed(self, exc: AutoscalerError) -> None:
        if isinstance(exc, AuthenticationError):
            result, why = "forbidden", f"{exc}; {PERMISSION}"
        elif isinstance(exc, NotFoundError):
            result, why = "not_found", f"{exc}; check webhook.hook_id and github.owner"
        else:
            result, why = "error", str(exc)
        self.metrics.webhook_delivery_log_reads.labels(result).inc()
        self.horizon = None  # the next good read judges nothing: the gap is unknown
        if self._unusable != result:
            log.warning(
                "webhook delivery log unreadable (%s): failed deliveries are not "
                "redelivered and the reconcile lists everything it would without "
                "webhook.hook_id",
                why,
            )
        self._unusable = result
