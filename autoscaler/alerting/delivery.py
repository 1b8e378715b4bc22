"""Delivery of outbox notifications to receivers over httpx, off the tick.

This module runs the rounds and records their outcomes; how one notification is sent
(payloads, requests, retries, the issue look-up) is :mod:`autoscaler.alerting.senders`.

- **The tick never waits for a receiver.** :meth:`Deliverer.deliver` starts one delivery
  round per receiver that has notifications waiting and none in flight, each in its own
  daemon thread, and returns at once. A round records every outcome in the store itself,
  item by item, right after the receiver answered (so a crash can resend at most the one
  notification in flight: delivery is at least once, and every payload carries the
  notification's ``event_id`` to dedupe on).
- **Every round has its own overall deadline** (``deadline``, default 10 s): no attempt
  starts, and no backoff wait begins, that would end past it, and each attempt's timeout
  is the receiver's ``timeout`` clipped to what is left. A receiver that accepts the
  connection and never answers costs its round ``deadline`` seconds, not ``timeout`` x
  ``max_attempts`` plus backoffs, and costs the tick nothing. Items a round did not reach
  wait for a later round, in order.
- Rounds are daemon threads, at most one per receiver: a hung receiver never holds up the
  others nor the process's exit. :meth:`close` (``once`` and shutdown) waits at most
  ``deadline`` for rounds in flight; what they did not confirm stays in the outbox and
  goes out on the next start.
- Attempts are bounded (``max_attempts``) with full-jitter exponential backoff (tenacity,
  injectable ``sleep``). Only transient failures are retried (connection errors,
  timeouts, 408/425/429/5xx).
- Items are sent in order; after a receiver's first failure the rest of its items wait
  for the next round (it is probably down), so a FIRING is never overtaken by its RESOLVED.
- ``github_issue``: before opening an issue for a FIRING with no issue on record, the
  receiver looks for an open issue carrying the alert's marker (:func:`render.github_marker`):
  if its create was delivered but not recorded (a crash, a lost response), it adopts that
  issue instead of opening a second one. The create itself is never retried blind within
  a round (the next round looks first). A RESOLVED with no issue on record closes the open
  issue it finds the same way.
- Receiver URLs are secrets: no log line, error or metric of ours names one (only the
  receiver's name), and httpx's own request log is dropped for receiver requests at every
  level (:mod:`autoscaler.alerting.httplog`).
- **Only the leader notifies** (``state.backend: dynamodb``, two controllers): every
  send is preceded by ``gate.allows("notify")`` (the lease held with its safety margin),
  and the outbox writes themselves are fenced by the lease's epoch, so a controller that
  lost the lease mid-round neither sends the rest nor records anything; the new leader
  sends what was not confirmed.
- Outcomes, counted in ``alert_notifications_total{receiver,result}``: ``sent``;
  ``retried`` (one per retry attempt); ``failed`` (gave up this round, stays in the outbox,
  logged as a warning); ``rejected`` (a permanent 4xx: retrying cannot help, removed from
  the outbox and logged as an error, never silently); ``dry_run``. A store that cannot
  record an outcome ends the round (logged, counted in ``state_store_errors_total``, and
  reported into :class:`autoscaler.health.Health`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from autoscaler.alerting.httplog import receiver_requests
from autoscaler.alerting.lifecycle import Notification
from autoscaler.alerting.senders import Call, IssueNumbers, Sender
from autoscaler.alerting.store import AlertStore, OutboxItem
from autoscaler.config import Config, ReceiverConfig
from autoscaler.errors import NotLeaderError, PermanentError, StateError, TransientError
from autoscaler.health import STATE, Health
from autoscaler.ports import ActionGate, SoleWriter
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """The result of one outbox item for one receiver."""

    item_id: int
    receiver: str
    result: str
    """``sent``, ``failed``, ``rejected`` or ``dry_run``."""
    error: str | None = None
    issue: tuple[str, int | None] | None = None
    """github_issue: (fingerprint, issue number or None: closed) to remember."""


class Deliverer:
    """Sends outbox notifications; see the module docstring for the guarantees."""

    def __init__(
        self,
        receivers: Mapping[str, ReceiverConfig],
        metrics: Metrics,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        deadline: float = 10.0,
        backoff: float = 0.5,
        max_backoff: float = 5.0,
        github_api_url: str = "https://api.github.com",
        github_token: Secret | None = None,
        dry_run: bool = False,
        health: Health | None = None,
        gate: ActionGate | None = None,
    ) -> None:
        self.receivers = dict(receivers)
        self.metrics = metrics
        self.deadline = deadline
        self.dry_run = dry_run
        self.health = health if health is not None else Health()
        #: Asked before every send: only the leader notifies (two controllers on one table).
        self.gate: ActionGate = gate if gate is not None else SoleWriter()
        self._transport = transport
        self._monotonic = monotonic
        #: How each notification is sent (payloads, requests, retries): alerting.senders.
        self._sender = Sender(
            metrics,
            sleep=sleep,
            monotonic=monotonic,
            backoff=backoff,
            max_backoff=max_backoff,
            github_api_url=github_api_url,
            github_token=github_token,
        )
        self._rounds: dict[str, threading.Thread] = {}
        self._stopping = threading.Event()

    @classmethod
    def from_config(cls, config: Config, metrics: Metrics, **kwargs: Any) -> Deliverer:
        """Receivers from ``config.alerts``; github_issue defaults to the github section."""
        kwargs.setdefault("github_api_url", config.github.api_url)
        kwargs.setdefault("github_token", config.github.token)
        return cls(config.alerts.receivers, metrics, **kwargs)

    # --- the tick's side: never blocks on a receiver

    def deliver(self, store: AlertStore) -> None:
        """Start a round for every receiver with notifications waiting and none in flight.
        Returns at once; raises StateError when the outbox cannot be read."""
        self._reap()
        by_receiver: dict[str, list[OutboxItem]] = {}
        for item in store.pending():
            by_receiver.setdefault(item.receiver, []).append(item)
        for name in self.receivers:
            count = len(by_receiver.get(name, ()))
            self.metrics.alert_notifications_pending.labels(name).set(count)
        for name, items in by_receiver.items():
            if name in self._rounds or self._stopping.is_set():
                continue
            rc = self.receivers.get(name)
            if rc is None:
                for item in items:
                    log.error("alert notification for unknown receiver %r dropped", name)
                    self.metrics.alert_notifications.labels(name, "rejected").inc()
                    store.mark_delivered(item.id)
                continue
            thread = threading.Thread(
                target=self._round,
                args=(rc, items, store),
                name=f"alerts-{name}",
                daemon=True,
            )
            self._rounds[name] = thread
            thread.start()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for the rounds in flight (at most ``timeout`` seconds, default
        ``deadline``). True when none is left."""
        limit = self._monotonic() + (self.deadline if timeout is None else timeout)
        for thread in list(self._rounds.values()):
            thread.join(max(0.0, limit - self._monotonic()))
        self._reap()
        return not self._rounds

    def close(self, timeout: float | None = None) -> None:
        """Let rounds in flight finish within ``timeout`` (default: ``deadline`` and a second
        for a round that just hit its deadline to record it), then stop: a round still
        running records nothing more (its item stays in the outbox)."""
        if not self.flush(self.deadline + 1.0 if timeout is None else timeout):
            names = ", ".join(sorted(self._rounds))
            log.warning(
                "alert delivery to %s still in flight at shutdown; it stays in the outbox", names
            )
        self._stopping.set()

    def _reap(self) -> None:
        for name, thread in list(self._rounds.items()):
            if not thread.is_alive():
                del self._rounds[name]

    # --- alerts test: one notification, now, retries included

    def send_one(self, rc: ReceiverConfig, n: Notification, issue: int | None = None) -> Outcome:
        """Send one notification now (``alerts test``), within ``deadline``; nothing stored."""
        issues = IssueNumbers(None, rc.name)
        issues.set(n.fingerprint, issue)
        with (
            receiver_requests(),
            httpx.Client(transport=self._transport, timeout=rc.timeout) as client,
        ):
            call = Call(client, self._monotonic() + self.deadline)
            try:
                self._sender.send(call, rc, n, issues)
            except PermanentError as exc:
                return Outcome(0, rc.name, "rejected", str(exc))
            except TransientError as exc:
                return Outcome(0, rc.name, "failed", str(exc))
        number = issues.get(n.fingerprint)
        return Outcome(0, rc.name, "sent", issue=(n.fingerprint, number))

    # --- in a round's thread

    def _round(self, rc: ReceiverConfig, items: list[OutboxItem], store: AlertStore) -> None:
        try:
            with (
                receiver_requests(),
                httpx.Client(transport=self._transport, timeout=rc.timeout) as client,
            ):
                call = Call(client, self._monotonic() + self.deadline)
                for item in items:
                    if self._stopping.is_set() or not self._deliver_one(call, rc, item, store):
                        break
                    pending = len(store.pending(rc.name))
                    self.metrics.alert_notifications_pending.labels(rc.name).set(pending)
        except NotLeaderError as exc:  # the lease moved on: the new leader sends the rest
            log.warning("alert delivery to %s stopped: %s", rc.name, exc)
        except StateError as exc:
            self._state_failed(exc)
        except Exception:  # a bug in a sender: keep the items, say so loudly
            log.exception("alert delivery to %r crashed; items stay in the outbox", rc.name)

    def _deliver_one(
        self, call: Call, rc: ReceiverConfig, item: OutboxItem, store: AlertStore
    ) -> bool:
        """Send one item and record the outcome; False ends the round."""
        n, count = item.notification, self.metrics.alert_notifications
        what = f"{n.status} {n.fingerprint} (event {n.event_id})"
        if self.dry_run:
            log.info("dry run: would send %s to %s", what, rc.name)
            count.labels(rc.name, "dry_run").inc()
            store.mark_delivered(item.id)
            return True
        if not self.gate.allows(
            "notify", f"{rc.name} {n.event_id}"
        ):  # not the leader (any more): it is theirs to send
            log.info("alert %s to %s left to the leader", what, rc.name)
            return False
        try:
            self._sender.send(call, rc, n, IssueNumbers(store, rc.name))
        except PermanentError as exc:
            log.error("alert %s to %s rejected (%s); not retried", what, rc.name, exc)
            count.labels(rc.name, "rejected").inc()
            store.mark_delivered(item.id)
            return True
        except TransientError as exc:
            log.warning("alert %s to %s failed (%s); retried next round", what, rc.name, exc)
            count.labels(rc.name, "failed").inc()
            if not self._stopping.is_set():
                store.mark_failed(item.id, str(exc))
            return False  # the receiver is likely down: the rest waits, in order
        if self._stopping.is_set():  # the store is closing: this one goes again on restart
            return False
        store.mark_delivered(item.id)
        log.info("alert %s sent to %s", what, rc.name)
        count.labels(rc.name, "sent").inc()
        return True

    def _state_failed(self, exc: StateError) -> None:
        if self._stopping.is_set():
            return  # shutting down: what was not recorded goes again on the next start
        log.error("alert delivery stopped: %s", exc)
        self.metrics.state_store_errors.labels(exc.operation or "unknown", exc.code).inc()
        self.health.report(STATE, str(exc))
