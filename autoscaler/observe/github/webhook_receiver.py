"""The webhook listener's logic, off the tick: verify, parse, queue, answer at once.

:meth:`WebhookReceiver.handle` takes one request (headers, raw body) and returns the
status GitHub sees. It never touches the index: verified ``workflow_job`` events go into
a bounded queue the tick drains (:meth:`drain`), so the listener never waits for the
tick and the tick never waits for the listener. When the queue is full the answer is
503: GitHub marks the delivery failed, and the reconcile poll counts the job.

Answers (each counted in ``ci_autoscaler_webhook_events_total{event,action,result}`` and,
when refused, logged with the delivery id and the reason, never the body):

==========================  ======  ============================
what                        status  result
==========================  ======  ============================
another Content-Type        415     unsupported_type
no or bad signature         401     bad_signature
body over the limit         413     too_large
``ping``                    200     accepted
another event               202     ignored
malformed / wrong types     400     invalid
unknown action              422     invalid
delivery id or body again   409     duplicate
queue full                  503     queue_full
state store unreachable     503     store_error
``workflow_job`` queued     202     (accepted/stale/duplicate when the tick applies it)
``workflow_job`` stored     202     accepted/stale/duplicate (the store decides)
==========================  ======  ============================

With a state store (``store``; ``run`` always passes one) a verified event is not queued
for this process: it is written to the store's job index at once, by a conditional write
that applies the index's ordering rules against whatever another replica wrote
(:mod:`autoscaler.observe.github.webhook_rows`). The leader reads the index from there, so
a delivery that reached a follower counts as one that reached the leader.

GitHub sends a body in one of two ways, set per webhook (its REST API defaults to the
second): ``application/json``, the payload itself, or ``application/x-www-form-urlencoded``
with the payload in the form's ``payload`` field. The signature covers the raw body either
way. Any other Content-Type is refused with 415, signed or not.

Labels stay bounded whatever a client sends: ``event`` is ``workflow_job``, ``ping`` or
``other``; ``action`` one of GitHub's four, ``none`` or ``other``.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qs

from prometheus_client import Counter

from autoscaler.config import WebhookConfig
from autoscaler.errors import StateError
from autoscaler.observe.github.group_commit import GroupCommit
from autoscaler.observe.github.parse import BadPage, PayloadError, UnknownAction
from autoscaler.observe.github.webhook_index import event_row
from autoscaler.observe.github.webhook_rows import JobIndexStore, Outcome
from autoscaler.observe.github.webhooks import (
    ACTIONS,
    SIGNATURE_HEADER,
    WorkflowJobEvent,
    parse_workflow_job,
    signed_digest,
)
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github.webhooks")

PATH = "/github/webhook"
#: Delivery ids and body digests remembered to refuse a replay (409).
REMEMBERED = 10_000
#: A refusal of the same result is logged as a warning at most this often (seconds).
LOG_EVERY = 60.0
_DELIVERY_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


@dataclass(frozen=True)
class Delivery:
    """A verified event waiting for the tick, with when it arrived."""

    event: WorkflowJobEvent
    received_at: datetime


def _names(headers: Mapping[str, str]) -> tuple[str, str, str]:
    """The bounded event label, the delivery id, and the id as it may be logged."""
    name = headers.get("x-github-event", "")
    event = name if name in ("workflow_job", "ping") else "other"
    delivery = headers.get("x-github-delivery", "")
    return event, delivery, delivery if _DELIVERY_ID.match(delivery) else "?"


def _utc_now() -> datetime:
    return datetime.now(UTC)


def media_type(headers: Mapping[str, str]) -> str:
    """The Content-Type without its parameters, lower-cased (``""`` when absent)."""
    return headers.get("content-type", "").partition(";")[0].strip().lower()


def _json_of(kind: str, body: bytes) -> bytes:
    """The JSON payload of a verified body: the body itself, or the form's ``payload``
    field. Raises :class:`BadPage` when a form has no single ``payload``."""
    if kind == JSON:
        return body
    try:
        fields = parse_qs(body.decode("ascii"), strict_parsing=True, max_num_fields=16)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadPage("form: not URL-encoded") from exc
    payload = fields.get("payload", [])
    if len(payload) != 1:
        raise BadPage("form: expected one payload field")
    return payload[0].encode()


class WebhookReceiver:
    """Thread-safe: the listener's worker threads call :meth:`handle`, the tick drains."""

    def __init__(
        self,
        config: WebhookConfig,
        metrics: Metrics,
        *,
        on_event: Callable[[], None] = lambda: None,
        # ``on_event``: called after a ``queued`` delivery is queued (wakes the tick).
        clock: Callable[[], datetime] = _utc_now,
        store: JobIndexStore | None = None,
    ) -> None:
        self._secret = config.secret.reveal().encode("utf-8")
        self._max_body = config.max_body_bytes
        self._metrics = metrics
        self._on_event = on_event
        self._clock = clock
        #: The committer that makes each delivery durable before it is answered (with a
        #: store), several at a time.
        self._commits = None if store is None else GroupCommit(store)
        self._inbox: queue.Queue[Delivery] = queue.Queue(maxsize=config.queue_size)
        # Delivery ids (str) and body digests (bytes): never equal to each other.
        self._seen: OrderedDict[str | bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self._logged: dict[str, float] = {}
        #: The counters' children by labels, looked up once (a lookup takes a lock).
        self._counters: dict[tuple[str, str, str], Counter] = {}

    def __repr__(self) -> str:
        return f"WebhookReceiver(max_body={self._max_body})"

    @property
    def max_body(self) -> int:
        return self._max_body

    def drain(self) -> list[Delivery]:
        """Every delivery queued so far, oldest first."""
        out: list[Delivery] = []
        while True:
            try:
                out.append(self._inbox.get_nowait())
            except queue.Empty:
                return out

    def too_large(self, headers: Mapping[str, str]) -> Answer:
        """The answer to a delivery whose announced length is over the limit (unread)."""
        event, _, shown = _names(headers)
        return self._refuse(
            413, event, "none", "too_large", delivery=shown, reason="body over the limit"
        )

    def handle(self, headers: Mapping[str, str], body: bytes) -> Answer:
        """One ``POST /github/webhook`` (header names lower-cased), answered when done."""
        answer = self.accept(headers, body)
        return answer if isinstance(answer, Answer) else answer.result()

    def accept(self, headers: Mapping[str, str], body: bytes) -> Answer | Future[Answer]:
        """One ``POST /github/webhook``: the answer, or (a delivery the store must take
        first) a future of it, completed by the committer thread once the row is durable.
        Returns at once either way: CPU work only (signature, parse), so the listener may
        call it on its event loop and await the future there, holding no thread."""
        event, delivery, shown = _names(headers)
        kind = media_type(headers)
        if kind not in (JSON, FORM):
            return self._refuse(
                415, event, "none", "unsupported_type", delivery=shown, reason="Content-Type"
            )
        if len(body) > self._max_body:
            return self.too_large(headers)
        digest = signed_digest(self._secret, body, headers.get(SIGNATURE_HEADER))
        if digest is None:
            return self._refuse(
                401, event, "none", "bad_signature", delivery=shown, reason="signature"
            )
        if event == "ping":
            self._count("ping", "none", "accepted")
            return Answer(200, b"pong\n")
        if event != "workflow_job":
            self._count("other", "none", "ignored")
            log.debug("webhook delivery %s: event not handled, ignored", shown)
            return Answer(202, b"ignored: only workflow_job is handled\n")
        try:
            parsed = parse_workflow_job(_json_of(kind, body), delivery)
        except PayloadError as exc:
            status = 422 if isinstance(exc, UnknownAction) else 400
            return self._refuse(
                status, event, "other", "invalid", delivery=shown, reason=f"{exc.kind}: {exc}"
            )
        action = parsed.action if parsed.action in ACTIONS else "other"
        if not self._first(delivery, digest):
            return self._refuse(
                409, event, action, "duplicate", delivery=shown, reason="delivered before"
            )
        if self._commits is not None:
            return self._record(parsed, action, digest, delivery=delivery, shown=shown)
        try:
            self._inbox.put_nowait(Delivery(parsed, self._clock()))
        except queue.Full:
            self._forget(delivery, digest)  # GitHub's redelivery must be taken then
            return self._refuse(
                503, event, action, "queue_full", delivery=shown, reason="queue full"
            )
        if parsed.action == "queued":
            self._on_event()  # demand: wake the tick (in_progress/completed can wait)
        return Answer(202, b"accepted\n")

    def close(self) -> None:
        """Write the deliveries waiting for the store, then stop its committer."""
        if self._commits is not None:
            self._commits.close()

    def _record(
        self,
        parsed: WorkflowJobEvent,
        action: str,
        digest: bytes,
        *,
        delivery: str,
        shown: str,
    ) -> Future[Answer]:
        """Hand the event's row to the committer; the answer follows the store's: the
        outcome, or 503 when the store could not take it (GitHub marks the delivery
        failed: a redelivery, or the reconcile, catches the job), counted and logged."""
        assert self._commits is not None
        answer: Future[Answer] = Future()

        def written(outcome: Future[Outcome]) -> None:
            try:
                result = outcome.result()
            except StateError as exc:
                self._forget(delivery, digest)  # GitHub's redelivery must be taken then
                self._metrics.webhook_store_errors.labels("record", exc.code or "error").inc()
                answer.set_result(
                    self._refuse(
                        503,
                        "workflow_job",
                        action,
                        "store_error",
                        delivery=shown,
                        reason=f"state store: {exc}",
                    )
                )
                return
            except Exception as exc:  # a bug: the committer logged it, the listener answers 500
                self._forget(delivery, digest)
                self._count("workflow_job", action, "error")
                answer.set_exception(exc)
                return
            self._count("workflow_job", action, result.value)
            if result is Outcome.ACCEPTED and parsed.action == "queued":
                self._on_event()  # demand: wake this process's tick (the leader's watches)
            answer.set_result(Answer(202, f"{result.value}\n".encode()))

        self._commits.submit(event_row(parsed, self._clock())).add_done_callback(written)
        return answer

    def _count(self, event: str, action: str, result: str) -> None:
        key = (event, action, result)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self._metrics.webhook_events.labels(*key)
        counter.inc()

    def _first(self, delivery: str, digest: bytes) -> bool:
        """Remember this delivery id and body digest; False when either was seen already."""
        keys: list[str | bytes] = [digest] + ([delivery] if delivery else [])
        with self._lock:
            if any(key in self._seen for key in keys):
                return False
            for key in keys:
                self._seen[key] = None
            while len(self._seen) > REMEMBERED:
                self._seen.popitem(last=False)
        return True

    def _forget(self, delivery: str, digest: bytes) -> None:
        with self._lock:
            self._seen.pop(digest, None)
            self._seen.pop(delivery, None)

    def _refuse(
        self, status: int, event: str, action: str, result: str, *, delivery: str, reason: str
    ) -> Answer:
        self._count(event, action, result)
        now = time.monotonic()
        with self._lock:
            loud = now - self._logged.get(result, -LOG_EVERY) >= LOG_EVERY
            if loud:
                self._logged[result] = now
        log.log(
            logging.WARNING if loud else logging.DEBUG,
            "webhook delivery %s refused (%d %s): %s",
            delivery,
            status,
            result,
            reason,
        )
        return Answer(status, f"{result}\n".encode())
