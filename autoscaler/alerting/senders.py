"""How one notification reaches one receiver: its payload, its HTTP requests and their retries.

:class:`~autoscaler.alerting.delivery.Deliverer` decides *when* to send (rounds off the
tick, one per receiver, in order, only the leader, every outcome recorded in the outbox);
this module is *how*: the payload each receiver type takes (webhook, Slack, PagerDuty,
Alertmanager, ``github_issue``), each request retried on transient failures only
(connection errors, timeouts, 408/425/429/5xx) by the one retry policy
(:mod:`autoscaler.retrying`: full-jitter backoff, never past the round's deadline), and
the ``github_issue`` receiver's look-up of an open issue carrying the alert's marker
before it opens one (a create is never retried blind). A failure is a
:class:`~autoscaler.errors.TransientError` or a :class:`~autoscaler.errors.PermanentError`;
no error of ours names a receiver's URL (it is a secret).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from autoscaler.alerting import alertmanager, render
from autoscaler.alerting.lifecycle import Notification
from autoscaler.alerting.store import AlertStore
from autoscaler.config import ReceiverConfig, RetryConfig
from autoscaler.errors import PermanentError, TransientError
from autoscaler.retrying import RetryPolicy
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

#: The deliverer's logger: a sender's lines are delivery's, whichever module writes them.
log = logging.getLogger("autoscaler.alerting.delivery")

PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
#: Open issues examined when looking for an alert's issue (100 per page).
ISSUE_LOOKUP_PAGES = 10


@dataclass(frozen=True)
class Call:
    """One round's HTTP client and the monotonic time its deadline passes."""

    client: httpx.Client
    deadline_at: float


class IssueNumbers:
    """Where the github_issue receiver keeps its issue numbers: the store, or (``alerts
    test``) a dict."""

    def __init__(self, store: AlertStore | None, receiver: str) -> None:
        self._store, self._receiver = store, receiver
        self._numbers: dict[str, int | None] = {}

    def get(self, fingerprint: str) -> int | None:
        if self._store is None:
            return self._numbers.get(fingerprint)
        return self._store.issue_number(self._receiver, fingerprint)

    def set(self, fingerprint: str, number: int | None) -> None:
        if self._store is None:
            self._numbers[fingerprint] = number
        else:
            self._store.set_issue_number(self._receiver, fingerprint, number)


def check_status(response: httpx.Response) -> httpx.Response:
    """A receiver's answer: below 300 passes; 408, 425, 429 and 5xx are transient (retried);
    any other status is permanent (retrying cannot help)."""
    code = response.status_code
    if code < 300:
        return response
    message = f"HTTP {code}"
    if code in (408, 425, 429) or code >= 500:
        raise TransientError(message, code=str(code))
    raise PermanentError(message, code=str(code))


def receiver_url(rc: ReceiverConfig) -> str:
    """The receiver's URL, for the request alone (config validation requires one)."""
    if rc.url is None:
        raise PermanentError(f"receiver {rc.name} has no url", code="url")
    return rc.url.reveal()


class Sender:
    """Sends one notification to one receiver within a round's :class:`Call`. Built by
    :class:`~autoscaler.alerting.delivery.Deliverer`, whose settings (and defaults) it takes."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        sleep: Callable[[float], None],
        monotonic: Callable[[], float],
        backoff: float,
        max_backoff: float,
        github_api_url: str,
        github_token: Secret | None,
    ) -> None:
        self.metrics = metrics
        self._monotonic = monotonic
        #: Every request's retries (the round's deadline and the receiver's attempts are
        #: per call).
        self._retry = RetryPolicy(
            RetryConfig(initial_backoff=backoff, max_backoff=max_backoff),
            sleep=sleep,
            monotonic=monotonic,
        )
        self._github_api_url = github_api_url.rstrip("/")
        self._github_token = github_token

    def request(
        self,
        call: Call,
        rc: ReceiverConfig,
        method: str,
        url: str,
        body: Any,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        attempts: int | None = None,
    ) -> httpx.Response:
        """One request, retried on transient failures up to ``attempts`` (default the
        receiver's ``max_attempts``) within the round's deadline."""
        most = rc.max_attempts if attempts is None else attempts

        def once() -> httpx.Response:
            left = call.deadline_at - self._monotonic()
            if left <= 0:
                raise TransientError("delivery deadline passed", code="deadline")
            try:
                response = call.client.request(
                    method,
                    url,
                    json=body,
                    headers=headers,
                    params=params,
                    timeout=min(rc.timeout, left),
                )
            except httpx.TimeoutException:
                raise TransientError("timed out", code="timeout") from None
            except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
                # httpx's message quotes the URL: ours names the error only.
                raise PermanentError(f"unusable URL: {type(exc).__name__}", code="url") from None
            except httpx.TransportError as exc:
                raise TransientError(
                    f"transport error: {type(exc).__name__}", code="transport"
                ) from None
            return check_status(response)

        return self._retry.call(
            once,
            pool=f"receiver {rc.name}",
            operation=method,
            deadline_at=call.deadline_at,
            attempts=most,
            on_retry=lambda _: self.metrics.alert_notifications.labels(rc.name, "retried").inc(),
        )

    def send(self, call: Call, rc: ReceiverConfig, n: Notification, issues: IssueNumbers) -> None:
        """Send ``n`` to ``rc`` in the receiver type's payload; raises Transient/PermanentError."""
        if rc.type == "github_issue":
            self._github_issue(call, rc, n, issues)
            return
        if rc.type == "pagerduty":
            key = rc.routing_key.reveal() if rc.routing_key is not None else ""
            body: Any = render.pagerduty_payload(n, key)
            url = rc.url.reveal() if rc.url is not None else PAGERDUTY_URL
        elif rc.type == "slack":
            body, url = render.slack_payload(n), receiver_url(rc)
        elif rc.type == "alertmanager":
            self._alertmanager(call, rc, n)
            return None
        elif rc.type == "alertmanager_webhook":
            body, url = render.alertmanager_payload(n, rc.name), receiver_url(rc)
        else:
            body, url = render.webhook_payload(n), receiver_url(rc)
        self.request(call, rc, "POST", url, body)

    def _alertmanager(self, call: Call, rc: ReceiverConfig, n: Notification) -> None:
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
                self.request(call, rc, "POST", url, body)
            except (PermanentError, TransientError) as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _github_issue(
        self, call: Call, rc: ReceiverConfig, n: Notification, issues: IssueNumbers
    ) -> None:
        api = (rc.url.reveal() if rc.url is not None else self._github_api_url).rstrip("/")
        token = rc.token or self._github_token
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token.reveal()}"
        base = f"{api}/repos/{rc.repo}/issues"
        fp = n.fingerprint
        number = issues.get(fp)
        found_event = None
        if number is None:
            found = self._find_issue(call, rc, base, n, headers)
            if found is not None:
                number, found_event = found
                log.info("alert %s: adopting open issue #%d in %s", fp, number, rc.repo)
        if n.status == "FIRING" and number is None:
            body = {
                "title": render.title(n.evaluation),
                "body": render.github_issue_body(n),
                "labels": render.github_issue_labels(n.evaluation, rc.labels),
            }
            # Never retried here: a create whose answer was lost may have opened the issue,
            # and only the lookup above (next round) can tell. Retrying blind opens two.
            created = self.request(call, rc, "POST", base, body, headers=headers, attempts=1)
            number = int(created.json()["number"])
        elif number is not None and found_event != n.event_id:
            # found_event == event_id: the issue was opened by this very notification, whose
            # delivery was not recorded; it says everything already.
            comment = {"body": render.github_comment_body(n)}
            self.request(call, rc, "POST", f"{base}/{number}/comments", comment, headers=headers)
        if n.status == "RESOLVED" and number is not None:
            close = {"state": "closed", "state_reason": "completed"}
            self.request(call, rc, "PATCH", f"{base}/{number}", close, headers=headers)
            number = None
        elif n.status == "RESOLVED":
            log.info("alert %s resolved; no open issue for it in %s", fp, rc.repo)
        issues.set(fp, number)

    def _find_issue(
        self,
        call: Call,
        rc: ReceiverConfig,
        base: str,
        n: Notification,
        headers: Mapping[str, str],
    ) -> tuple[int, str] | None:
        """(number, event id of its opening notification) of the newest open issue whose
        body carries this alert's marker, among issues with the alert's team label."""
        params = {
            "state": "open",
            "labels": render.github_issue_labels(n.evaluation)[0],
            "sort": "created",
            "direction": "desc",
            "per_page": "100",
        }
        url: str | None = base
        for _ in range(ISSUE_LOOKUP_PAGES):
            if url is None:
                break
            response = self.request(call, rc, "GET", url, None, headers=headers, params=params)
            for issue in response.json():
                marker = render.parse_github_marker(issue.get("body"))
                if "pull_request" not in issue and marker and marker[0] == n.fingerprint:
                    return int(issue["number"]), marker[1]
            url, params = response.links.get("next", {}).get("url"), {}
        return None
