"""Keeps each ``alertmanager`` receiver's Alertmanagers in step with the alert states.

Called once per tick after the lifecycle step (``AlertEngine.step``), never in a dry run.
It is not a lifecycle transition and adds nothing to the outbox: the other receivers'
notifications are unchanged. What it guarantees:

- Never blocks the tick: each post runs in a small thread pool; :meth:`sync` collects
  the posts that finished, starts the due ones and returns. A target (one Alertmanager
  URL of one receiver) with a post still in flight gets no second one.
- Every Alertmanager URL of a receiver (an HA pair) gets every post, and is tracked on
  its own: one that was down gets the whole current set as soon as it answers again.
- A target is due when it has not acknowledged an alert of the set (new firing, new
  resolved, or its last post failed) or ``resend`` seconds passed (alertmanager.due).
- One attempt per post; a failed one is simply due again next tick, and each post says
  the alerts are valid for 4 x max(resend, tick interval), so three lost ticks in a row
  do not expire an alert that still fires.
- Outcomes in ``ci_autoscaler_alertmanager_posts_total{receiver,result}``: ``sent``;
  ``failed`` (connection error, timeout, 408/429/5xx; logged as a warning, re-sent next
  tick); ``rejected`` (another 4xx: Alertmanager refuses the payload, logged as an error,
  tried again only at the next resend). Logs name the target by host only: receiver URLs
  may carry credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from autoscaler.alerting import alertmanager as am
from autoscaler.alerting.httplog import receiver_requests
from autoscaler.alerting.lifecycle import AlertState
from autoscaler.config import Config, ReceiverConfig
from autoscaler.errors import PermanentError, TransientError
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Result:
    receiver: str
    url: str = field(repr=False)  # a receiver URL: a secret
    keys: frozenset[tuple[str, str]]
    at: datetime
    result: str
    """``sent``, ``failed`` or ``rejected``."""


@dataclass
class _Target:
    acked: frozenset[tuple[str, str]] = frozenset()
    last_ok: datetime | None = None


def host(url: str) -> str:
    """``host:port`` of a URL, for logs: never the userinfo, path or query."""
    return httpx.URL(url).netloc.decode("ascii", "replace").rpartition("@")[2]


def post(client: httpx.Client, url: str, alerts: Any) -> None:
    """POST the postable alerts; raises TransientError/PermanentError by status."""
    try:
        code = client.post(url, json=alerts).status_code
    except httpx.TimeoutException:
        raise TransientError("timed out", code="timeout") from None
    except httpx.TransportError as exc:
        raise TransientError(f"transport error: {type(exc).__name__}", code="transport") from None
    if code < 300:
        return
    if code in (408, 425, 429) or code >= 500:
        raise TransientError(f"HTTP {code}", code=str(code))
    raise PermanentError(f"HTTP {code}", code=str(code))


class AlertmanagerSync:
    """See the module docstring."""

    def __init__(
        self,
        receivers: Mapping[str, ReceiverConfig],
        metrics: Metrics,
        *,
        resend: float = am.DEFAULT_RESEND,
        interval: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        max_workers: int = 2,
    ) -> None:
        self.receivers = {n: rc for n, rc in receivers.items() if rc.type == am.ALERTMANAGER}
        self.metrics = metrics
        self.resend = resend
        self.valid_for = am.valid_for(resend, interval)
        self._transport = transport
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="alertmgr")
        self._targets: dict[tuple[str, str], _Target] = {}
        self._inflight: dict[tuple[str, str], Future[_Result]] = {}
        self._resolved: dict[str, AlertState] = {}

    @classmethod
    def from_config(cls, config: Config, metrics: Metrics, **kwargs: Any) -> AlertmanagerSync:
        kwargs.setdefault("resend", config.alerts.alertmanager_resend)
        kwargs.setdefault("interval", config.poll_interval)
        return cls(config.alerts.receivers, metrics, **kwargs)

    def sync(self, states: Mapping[str, AlertState], now: datetime) -> None:
        """Collect finished posts, start the due ones; returns at once."""
        self._collect()
        self._resolved = am.retain_resolved(self._resolved, states, now)
        current = [*states.values(), *(s for fp, s in self._resolved.items() if fp not in states)]
        for name, rc in self.receivers.items():
            b = am.batch(current, name, now, self.valid_for)
            for url in am.api_urls(rc):
                key = (name, url)
                target = self._targets.setdefault(key, _Target())
                if not b.keys:  # nothing left to say: whatever comes next is news
                    target.acked = frozenset()
                if key in self._inflight:
                    continue
                if not am.due(b.keys, target.acked, target.last_ok, now, self.resend):
                    continue
                self._inflight[key] = self._pool.submit(self._post, rc, url, b, now)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the posts in flight and record them (tests;
        ``once`` before it exits). True when none is left in flight."""
        wait(list(self._inflight.values()), timeout=timeout)
        self._collect()
        return not self._inflight

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _collect(self) -> None:
        for key, fut in list(self._inflight.items()):
            if not fut.done():
                continue
            del self._inflight[key]
            try:
                r = fut.result()
            except Exception:  # a bug here must not end the loop; say so loudly
                log.exception("alertmanager post for %r crashed", key[0])
                continue
            target = self._targets.setdefault(key, _Target())
            if r.result == "sent" and r.keys != target.acked:
                firing = sum(1 for _, status in r.keys if status == "firing")
                log.info(
                    "alertmanager %s at %s now holds %d firing and %d resolved alerts",
                    r.receiver,
                    host(r.url),
                    firing,
                    len(r.keys) - firing,
                )
            if r.result != "failed":
                target.acked, target.last_ok = r.keys, r.at
            self.metrics.alertmanager_posts.labels(r.receiver, r.result).inc()

    # --- in a worker thread
    def _post(self, rc: ReceiverConfig, url: str, b: am.Batch, now: datetime) -> _Result:
        where = host(url)
        result = "sent"
        try:
            with (
                receiver_requests(),
                httpx.Client(transport=self._transport, timeout=rc.timeout) as client,
            ):
                post(client, url, list(b.alerts))
        except TransientError as exc:
            log.warning(
                "alertmanager %s at %s: post of %d alerts failed (%s); re-sent next tick",
                rc.name,
                where,
                len(b.alerts),
                exc,
            )
            result = "failed"
        except PermanentError as exc:
            log.error(
                "alertmanager %s at %s rejected %d alerts (%s); tried again in %gs",
                rc.name,
                where,
                len(b.alerts),
                exc,
                self.resend,
            )
            result = "rejected"
        else:
            log.debug("alertmanager %s at %s: posted %d alerts", rc.name, where, len(b.alerts))
        return _Result(rc.name, url, b.keys, now, result)
