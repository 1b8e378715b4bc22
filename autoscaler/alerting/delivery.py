"""Delivery of outbox notifications to receivers over httpx.

- Each receiver gets one background task per tick in a small thread pool; the tick waits
  at most ``deadline`` seconds for all of them together, so a slow receiver never blocks
  the tick or the other receivers. A task still running when the deadline passes keeps
  its items; its results are collected on a later tick (no item is sent twice in
  parallel: a receiver with a task in flight gets no new one).
- One attempt has the receiver's ``timeout``; attempts are bounded (``max_attempts``) with
  full-jitter exponential backoff (tenacity, injectable ``sleep``). Only transient
  failures are retried (connection errors, timeouts, 408/429/5xx).
- Items are sent in order; after a receiver's first failure the rest of its items wait
  for the next tick (it is probably down), so a FIRING is never overtaken by its RESOLVED.
- Outcomes, counted in ``alert_notifications_total{receiver,result}``: ``sent``;
  ``retried`` (one per retry attempt); ``failed`` (gave up this tick, stays in the outbox,
  retried next tick, logged as a warning); ``rejected`` (a permanent 4xx: retrying cannot
  help, removed from the outbox and logged as an error, never silently); ``dry_run``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_random_exponential

from autoscaler.alerting import alertmanager, render
from autoscaler.alerting.lifecycle import Notification
from autoscaler.alerting.store import OutboxItem, StateStore
from autoscaler.config import Config, ReceiverConfig
from autoscaler.config.reader import Secret
from autoscaler.errors import PermanentError, TransientError
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"


@dataclass(frozen=True)
class Outcome:
    """The result of one outbox item for one receiver."""

    item_id: int
    receiver: str
    result: str
    """``sent``, ``failed``, ``rejected`` or ``dry_run``."""
    error: str | None = None
    issue: tuple[str, int | None] | None = None
    """github_issue: (fingerprint, issue number or None to forget) to store."""


@dataclass
class _Issues:
    numbers: dict[str, int | None] = field(default_factory=dict)


def _check(response: httpx.Response) -> httpx.Response:
    code = response.status_code
    if code < 300:
        return response
    message = f"HTTP {code}"
    if code in (408, 425, 429) or code >= 500:
        raise TransientError(message, code=str(code))
    raise PermanentError(message, code=str(code))


class Deliverer:
    """Sends outbox notifications; see the module docstring for the guarantees."""

    def __init__(
        self,
        receivers: Mapping[str, ReceiverConfig],
        metrics: Metrics,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        deadline: float = 10.0,
        max_workers: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 5.0,
        github_api_url: str = "https://api.github.com",
        github_token: Secret | None = None,
        dry_run: bool = False,
    ) -> None:
        self.receivers = dict(receivers)
        self.metrics = metrics
        self.deadline = deadline
        self.dry_run = dry_run
        self._transport = transport
        self._sleep = sleep
        self._backoff, self._max_backoff = backoff, max_backoff
        self._github_api_url = github_api_url.rstrip("/")
        self._github_token = github_token
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="alerts")
        self._inflight: dict[str, Future[list[Outcome]]] = {}

    @classmethod
    def from_config(cls, config: Config, metrics: Metrics, **kwargs: Any) -> Deliverer:
        """Receivers from ``config.alerts``; github_issue defaults to the github section."""
        kwargs.setdefault("github_api_url", config.github.api_url)
        kwargs.setdefault("github_token", config.github.token)
        return cls(config.alerts.receivers, metrics, **kwargs)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- the tick's entry point
    def deliver(self, store: StateStore) -> list[Outcome]:
        """Send what the outbox holds (within ``deadline``); apply results to ``store``."""
        outcomes = self._collect(store)
        by_receiver: dict[str, list[OutboxItem]] = {}
        for item in store.pending():
            by_receiver.setdefault(item.receiver, []).append(item)
        started: list[Future[list[Outcome]]] = []
        for name, items in by_receiver.items():
            if name in self._inflight:
                continue
            rc = self.receivers.get(name)
            if rc is None:
                for item in items:
                    log.error("alert notification for unknown receiver %r dropped", name)
                    self.metrics.alert_notifications.labels(name, "rejected").inc()
                    store.mark_delivered(item.id)
                continue
            numbers: dict[str, int | None] = {}
            if rc.type == "github_issue":
                fps = {i.notification.fingerprint for i in items}
                numbers = {fp: store.issue_number(name, fp) for fp in fps}
            fut = self._pool.submit(self._run_receiver, rc, items, _Issues(numbers))
            self._inflight[name] = fut
            started.append(fut)
        if started:
            wait(started, timeout=self.deadline)
        outcomes += self._collect(store)
        self._update_pending(store)
        return outcomes

    def send_one(self, rc: ReceiverConfig, n: Notification, issue: int | None = None) -> Outcome:
        """Send one notification now (``alerts test``), retries included."""
        return self._run_receiver(rc, [OutboxItem(0, rc.name, n)], _Issues({n.fingerprint: issue}))[
            0
        ]

    def _collect(self, store: StateStore) -> list[Outcome]:
        done: list[Outcome] = []
        for name, fut in list(self._inflight.items()):
            if not fut.done():
                continue
            del self._inflight[name]
            try:
                results = fut.result()
            except Exception:  # a bug in a sender: keep the items, say so loudly
                log.exception("alert delivery to %r crashed; items stay in the outbox", name)
                continue
            for o in results:
                if o.result == "failed":
                    store.mark_failed(o.item_id, o.error or "")
                else:
                    store.mark_delivered(o.item_id)
                if o.issue is not None:
                    store.set_issue_number(o.receiver, *o.issue)
            done.extend(results)
        return done

    def _update_pending(self, store: StateStore) -> None:
        counts: dict[str, int] = dict.fromkeys(self.receivers, 0)
        for item in store.pending():
            counts[item.receiver] = counts.get(item.receiver, 0) + 1
        for name, count in counts.items():
            self.metrics.alert_notifications_pending.labels(name).set(count)

    # --- in a worker thread
    def _run_receiver(
        self, rc: ReceiverConfig, items: list[OutboxItem], issues: _Issues
    ) -> list[Outcome]:
        out: list[Outcome] = []
        count = self.metrics.alert_notifications
        with httpx.Client(transport=self._transport, timeout=rc.timeout) as client:
            for item in items:
                n = item.notification
                if self.dry_run:
                    log.info("dry run: would send %s %s to %s", n.status, n.fingerprint, rc.name)
                    count.labels(rc.name, "dry_run").inc()
                    out.append(Outcome(item.id, rc.name, "dry_run"))
                    continue
                try:
                    issue = self._send(client, rc, n, issues)
                except PermanentError as exc:
                    log.error(
                        "alert %s %s to %s rejected (%s); not retried",
                        n.status,
                        n.fingerprint,
                        rc.name,
                        exc,
                    )
                    count.labels(rc.name, "rejected").inc()
                    out.append(Outcome(item.id, rc.name, "rejected", str(exc)))
                    continue
                except TransientError as exc:
                    log.warning(
                        "alert %s %s to %s failed (%s); retried next tick",
                        n.status,
                        n.fingerprint,
                        rc.name,
                        exc,
                    )
                    count.labels(rc.name, "failed").inc()
                    out.append(Outcome(item.id, rc.name, "failed", str(exc)))
                    break  # the receiver is likely down: the rest waits, in order
                log.info("alert %s %s sent to %s", n.status, n.fingerprint, rc.name)
                count.labels(rc.name, "sent").inc()
                out.append(Outcome(item.id, rc.name, "sent", issue=issue))
        return out

    def _request(
        self,
        client: httpx.Client,
        rc: ReceiverConfig,
        method: str,
        url: str,
        body: Any,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        def once() -> httpx.Response:
            try:
                return _check(client.request(method, url, json=body, headers=headers))
            except httpx.TimeoutException:
                raise TransientError("timed out", code="timeout") from None
            except httpx.TransportError as exc:
                raise TransientError(
                    f"transport error: {type(exc).__name__}", code="transport"
                ) from None

        def before_sleep(rs: RetryCallState) -> None:
            self.metrics.alert_notifications.labels(rc.name, "retried").inc()

        retrying = Retrying(
            stop=stop_after_attempt(rc.max_attempts),
            wait=wait_random_exponential(multiplier=self._backoff, max=self._max_backoff),
            retry=retry_if_exception_type(TransientError),
            sleep=self._sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        return retrying(once)

    def _send(
        self, client: httpx.Client, rc: ReceiverConfig, n: Notification, issues: _Issues
    ) -> tuple[str, int | None] | None:
        if rc.type == "github_issue":
            return self._github_issue(client, rc, n, issues)
        if rc.type == "pagerduty":
            key = rc.routing_key.reveal() if rc.routing_key is not None else ""
            body: Any = render.pagerduty_payload(n, key)
            url = rc.url or PAGERDUTY_URL
        elif rc.type == "slack":
            body, url = render.slack_payload(n), rc.url or ""
        elif rc.type == "alertmanager":
            self._alertmanager(client, rc, n)
            return None
        elif rc.type == "alertmanager_webhook":
            body, url = render.alertmanager_payload(n, rc.name), rc.url or ""
        else:
            body, url = render.webhook_payload(n), rc.url or ""
        self._request(client, rc, "POST", url, body)
        return None

    def _alertmanager(self, client: httpx.Client, rc: ReceiverConfig, n: Notification) -> None:
        """One notification as a one-off post to every Alertmanager (``alerts test``; the
        tick keeps them in step through AlertmanagerSync instead of the outbox)."""
        body = [
            alertmanager.notification_alert(
                n, alertmanager.valid_for(0, alertmanager.DEFAULT_RESEND)
            )
        ]
        errors: list[PermanentError | TransientError] = []
        for url in alertmanager.api_urls(rc):
            try:
                self._request(client, rc, "POST", url, body)
            except (PermanentError, TransientError) as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _github_issue(
        self, client: httpx.Client, rc: ReceiverConfig, n: Notification, issues: _Issues
    ) -> tuple[str, int | None]:
        api = (rc.url or self._github_api_url).rstrip("/")
        token = rc.token or self._github_token
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token.reveal()}"
        base = f"{api}/repos/{rc.repo}/issues"
        fp = n.fingerprint
        number = issues.numbers.get(fp)
        if n.status == "FIRING" and number is None:
            body = {
                "title": render.title(n.evaluation),
                "body": render.github_issue_body(n),
                "labels": render.github_issue_labels(n.evaluation, rc.labels),
            }
            created = self._request(client, rc, "POST", base, body, headers=headers).json()
            number = int(created["number"])
        elif number is not None:
            comment = {"body": render.github_comment_body(n)}
            self._request(client, rc, "POST", f"{base}/{number}/comments", comment, headers=headers)
            if n.status == "RESOLVED":
                close = {"state": "closed", "state_reason": "completed"}
                self._request(client, rc, "PATCH", f"{base}/{number}", close, headers=headers)
                number = None
        else:
            log.info("alert %s resolved; no open issue known for %s", fp, rc.name)
        issues.numbers[fp] = number
        return fp, number
