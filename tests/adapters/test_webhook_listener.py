"""``POST /github/webhook`` over real HTTP, and every bad input the issue names.

Each bad delivery must get a clear 4xx, a counter, a log line that carries neither the
secret nor the body, and leave the index exactly as it was.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import urlencode

import httpx
import pytest

from autoscaler.app.served import WebhookServer
from autoscaler.errors import StateUnusableError
from autoscaler.observe.github.webhook_receiver import FORM, WebhookReceiver
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.observe.github.webhooks import sign
from autoscaler.telemetry import Metrics
from tests.adapters.webhook_support import (
    ListedSource,
    counted,
    fresh_metrics,
    headers,
    hook_config,
)
from tests.unit.test_group_commit import GatedStore
from tests.unit.webhook_payloads import SECRET, body, payload

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
#: A marker inside every test body: it must never reach a log line.
MARK = "octo-org/pytorch"


@pytest.fixture
def listener() -> Iterator[tuple[WebhookServer, WebhookReceiver, Metrics]]:
    metrics = fresh_metrics()
    receiver = WebhookReceiver(hook_config(max_body_bytes=4096, queue_size=3), metrics)
    server = WebhookServer(receiver, metrics, "127.0.0.1", 0, header_timeout=2.0, body_timeout=2.0)
    server.start()
    try:
        yield server, receiver, metrics
    finally:
        server.stop()


def post(server: WebhookServer, raw: bytes, hdrs: dict[str, str]) -> httpx.Response:
    url = f"http://127.0.0.1:{server.port}/github/webhook"
    return httpx.post(url, content=raw, headers=hdrs, timeout=5.0)


def test_a_signed_workflow_job_is_accepted_and_queued(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
) -> None:
    server, receiver, _ = listener
    raw = body("queued", 42)
    answer = post(server, raw, headers(raw))
    assert answer.status_code == 202
    (delivery,) = receiver.drain()
    assert delivery.event.job.id == 42


ROUTES = [
    ("ping", "ping", b'{"zen": "Design for failure."}', 200, ("ping", "none", "accepted")),
    ("other-event", "push", b'{"ref": "main"}', 202, ("other", "none", "ignored")),
    ("check-run", "check_run", b"{}", 202, ("other", "none", "ignored")),
]


@pytest.mark.parametrize(
    ("event", "raw", "status", "labels"), [r[1:] for r in ROUTES], ids=[r[0] for r in ROUTES]
)
def test_ping_and_other_events(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
    event: str,
    raw: bytes,
    status: int,
    labels: tuple[str, str, str],
) -> None:
    server, receiver, metrics = listener
    assert post(server, raw, headers(raw, event=event)).status_code == status
    assert counted(metrics, *labels) == 1
    assert receiver.drain() == []


def test_the_listener_serves_nothing_else(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
) -> None:
    server, _, _ = listener
    base = f"http://127.0.0.1:{server.port}"
    assert httpx.get(f"{base}/metrics", timeout=5).status_code == 404
    assert httpx.get(f"{base}/github/webhook", timeout=5).status_code == 405


def _forged(raw: bytes) -> dict[str, str]:
    return headers(raw, secret=b"not the secret")


def _unsigned(raw: bytes) -> dict[str, str]:
    hdrs = headers(raw)
    del hdrs["x-hub-signature-256"]
    return hdrs


def _signed_then_truncated(raw: bytes) -> tuple[bytes, dict[str, str]]:
    return raw[:-7], headers(raw)  # the signature of the whole body: does not match


def _truncated_and_signed(raw: bytes) -> tuple[bytes, dict[str, str]]:
    cut = raw[: len(raw) // 2]
    return cut, headers(cut)  # a sender that signs what it cut: valid signature, bad JSON


def _retyped(raw: bytes) -> tuple[bytes, dict[str, str]]:
    data = json.loads(raw)
    data["workflow_job"]["id"] = "42"
    changed = json.dumps(data).encode()
    return changed, headers(changed)


def _unknown_action(raw: bytes) -> tuple[bytes, dict[str, str]]:
    data = json.loads(raw)
    data["action"] = "exploded"
    changed = json.dumps(data).encode()
    return changed, headers(changed)


def _oversized(raw: bytes) -> tuple[bytes, dict[str, str]]:
    data = payload("queued", 42)
    data["padding"] = "x" * 5000
    big = json.dumps(data).encode()
    return big, headers(big)


BAD = [
    ("forged", lambda raw: (raw, _forged(raw)), 401, ("workflow_job", "none", "bad_signature")),
    ("unsigned", lambda raw: (raw, _unsigned(raw)), 401, ("workflow_job", "none", "bad_signature")),
    (
        "truncated-in-transit",
        _signed_then_truncated,
        401,
        ("workflow_job", "none", "bad_signature"),
    ),
    ("truncated-then-signed", _truncated_and_signed, 400, ("workflow_job", "other", "invalid")),
    ("wrongly-typed", _retyped, 400, ("workflow_job", "other", "invalid")),
    ("unknown-action", _unknown_action, 422, ("workflow_job", "other", "invalid")),
    ("oversized", _oversized, 413, ("workflow_job", "none", "too_large")),
]


@pytest.mark.parametrize(
    ("make", "status", "labels"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input_is_refused_counted_logged_and_changes_nothing(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
    caplog: pytest.LogCaptureFixture,
    make: object,
    status: int,
    labels: tuple[str, str, str],
) -> None:
    server, receiver, metrics = listener
    source = WebhookSource(ListedSource(), receiver, hook_config(), metrics, poll_interval=60.0)
    source.observe(T0)
    good = body("queued", 1)
    assert post(server, good, headers(good)).status_code == 202
    source.observe(T0)
    before = source.index.jobs()
    raw, hdrs = make(body("queued", 42))  # type: ignore[operator]
    with caplog.at_level(logging.DEBUG, logger="autoscaler"):
        answer = post(server, raw, hdrs)
    assert answer.status_code == status
    assert counted(metrics, *labels) == 1
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals, "no log line"
    for line in refusals:
        assert MARK not in line and SECRET.decode() not in line
        assert hdrs["x-github-delivery"] in line  # which delivery, to find it in GitHub
    source.observe(T0)
    assert source.index.jobs() == before


def test_a_replayed_delivery_is_refused_and_changes_nothing(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same signed body again, under the same delivery id or a new one (the id is not
    signed): 409, counted, logged; the index holds the job once, unchanged."""
    server, receiver, metrics = listener
    raw = body("queued", 42)
    first = headers(raw)
    assert post(server, raw, first).status_code == 202
    with caplog.at_level(logging.WARNING, logger="autoscaler"):
        assert post(server, raw, first).status_code == 409
    assert post(server, raw, headers(raw)).status_code == 409
    assert counted(metrics, "workflow_job", "queued", "duplicate") == 2
    assert any("refused (409 duplicate)" in r.getMessage() for r in caplog.records)
    assert [d.event.job.id for d in receiver.drain()] == [42]


def test_a_full_queue_answers_503_so_github_marks_the_delivery_failed(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
) -> None:
    server, receiver, metrics = listener
    codes = []
    for job_id in range(5):
        raw = body("queued", job_id)
        codes.append(post(server, raw, headers(raw)).status_code)
    assert codes == [202, 202, 202, 503, 503]
    assert counted(metrics, "workflow_job", "queued", "queue_full") == 2
    receiver.drain()
    raw = body("queued", 4)  # GitHub's redelivery of a refused one is taken later
    assert post(server, raw, headers(raw)).status_code == 202


def test_length_is_required_and_an_oversized_body_is_refused_unread(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
) -> None:
    server, _, metrics = listener
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        conn.sendall(
            b"POST /github/webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: workflow_job\r\n"
            b"Content-Length: 999999999\r\n\r\n"
        )
        assert conn.recv(100).startswith(b"HTTP/1.1 413")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        conn.sendall(b"POST /github/webhook HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(100).startswith(b"HTTP/1.1 411")
    assert counted(metrics, "workflow_job", "none", "too_large") == 1


def test_stalled_clients_never_delay_a_delivery(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
) -> None:
    """Ten clients announce a body and never send it; a real delivery is still answered
    at once (connections are coroutines, not threads)."""
    server, _, _ = listener
    stalled = []
    for _ in range(10):
        conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        conn.sendall(b"POST /github/webhook HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        stalled.append(conn)
    try:
        raw = body("queued", 7)
        started = time.monotonic()
        assert post(server, raw, headers(raw)).status_code == 202
        assert time.monotonic() - started < 1.5
    finally:
        for conn in stalled:
            conn.close()


def test_headers_the_fake_would_not_send_are_bounded_labels(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
) -> None:
    """A forger choosing X-GitHub-Event cannot create label values (bounded cardinality)."""
    server, _, metrics = listener
    for n in range(5):
        raw = b"{}"
        hdrs = {
            "x-github-event": f"evil-{n}",
            "x-hub-signature-256": sign(b"x", raw),
            "content-type": "application/json",
        }
        assert post(server, raw, hdrs).status_code == 401
    assert counted(metrics, "other", "none", "bad_signature") == 5


def test_a_get_answers_405_for_the_load_balancers_health_check() -> None:
    """Two controllers behind the ALB (state.backend: dynamodb): the index lives in the
    table, so the follower takes deliveries too. It answered 503 here so that deliveries
    went to the leader only (its in-memory index was the one that scaled); now every
    listener answers the health check's GET with 405 (POST only): alive, no delivery."""
    metrics = fresh_metrics()
    receiver = WebhookReceiver(hook_config(), metrics)
    server = WebhookServer(receiver, metrics, "127.0.0.1", 0)
    server.start()
    try:
        answer = httpx.get(f"http://127.0.0.1:{server.port}/github/webhook", timeout=5)
        assert (answer.status_code, answer.headers["allow"]) == (405, "POST")
    finally:
        server.stop()


def _form(raw: bytes) -> bytes:
    return urlencode({"payload": raw.decode()}).encode()


def _typed(kind: str, raw: bytes, *, signed: bool = True) -> tuple[bytes, dict[str, str]]:
    hdrs = headers(raw) if signed else headers(raw, secret=b"not the secret")
    hdrs["content-type"] = kind
    return raw, hdrs


def _as_form(raw: bytes) -> tuple[bytes, dict[str, str]]:
    return _typed(FORM, _form(raw))


def _form_signed_over_the_json(raw: bytes) -> tuple[bytes, dict[str, str]]:
    form, hdrs = _as_form(raw)
    hdrs["x-hub-signature-256"] = sign(SECRET, raw)  # the signature covers the raw body
    return form, hdrs


def _form_without_payload(raw: bytes) -> tuple[bytes, dict[str, str]]:
    return _typed(FORM, urlencode({"data": raw.decode()}).encode())


def _no_type(raw: bytes) -> tuple[bytes, dict[str, str]]:
    raw, hdrs = _typed("", raw)
    del hdrs["content-type"]
    return raw, hdrs


CONTENT_TYPES = [
    ("json", lambda raw: _typed("application/json", raw), 202, ("workflow_job", "queued", None)),
    (
        "json-with-charset",
        lambda raw: _typed("Application/JSON; charset=utf-8", raw),
        202,
        ("workflow_job", "queued", None),
    ),
    ("form-payload-field", _as_form, 202, ("workflow_job", "queued", None)),
    (
        "form-signed-over-the-json",
        _form_signed_over_the_json,
        401,
        ("workflow_job", "none", "bad_signature"),
    ),
    ("form-without-payload", _form_without_payload, 400, ("workflow_job", "other", "invalid")),
    (
        "text-plain-signed",
        lambda raw: _typed("text/plain", raw),
        415,
        ("workflow_job", "none", "unsupported_type"),
    ),
    (
        "text-plain-unsigned",
        lambda raw: _typed("text/plain", raw, signed=False),
        415,
        ("workflow_job", "none", "unsupported_type"),
    ),
    (
        "multipart",
        lambda raw: _typed("multipart/form-data; boundary=x", raw),
        415,
        ("workflow_job", "none", "unsupported_type"),
    ),
    ("none", _no_type, 415, ("workflow_job", "none", "unsupported_type")),
]


@pytest.mark.parametrize(
    ("make", "status", "labels"),
    [c[1:] for c in CONTENT_TYPES],
    ids=[c[0] for c in CONTENT_TYPES],
)
def test_the_listener_takes_what_github_sends_and_refuses_other_content_types(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
    make: object,
    status: int,
    labels: tuple[str, str, str | None],
) -> None:
    """GitHub sends ``application/json`` (the payload is the body) or
    ``application/x-www-form-urlencoded`` (the payload is the form's ``payload`` field),
    signing the raw body either way. A signed ``text/plain`` body was taken (202); now
    anything else is 415, signed or not, and changes nothing."""
    server, receiver, metrics = listener
    raw, hdrs = make(body("queued", 42))  # type: ignore[operator]
    assert post(server, raw, hdrs).status_code == status
    event, action, result = labels
    if result is None:
        assert [d.event.job.id for d in receiver.drain()] == [42]
        assert [d.event.action for d in receiver.drain()] == []
    else:
        assert counted(metrics, event, action, result) == 1
        assert receiver.drain() == []


def test_a_half_sent_body_is_closed_at_the_body_deadline(
    listener: tuple[WebhookServer, WebhookReceiver, Metrics],
) -> None:
    """The head arrives at once, the body a byte every 0.1 s: each read is well within
    any per-read timeout, the whole body never is."""
    server, _, metrics = listener
    raw = body("queued", 9)
    hdrs = headers(raw)
    head = "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        conn.sendall(
            f"POST /github/webhook HTTP/1.1\r\nHost: x\r\nContent-Length: {len(raw)}\r\n"
            f"{head}\r\n".encode()
        )
        for byte in raw:
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
            if time.monotonic() - started > 6:
                raise AssertionError("the trickled body was never closed")
    assert time.monotonic() - started < 4.5  # body_timeout is 2 s in this fixture
    value = metrics.registry.get_sample_value(
        "ci_autoscaler_http_connections_dropped_total", {"reason": "webhook_body_timeout"}
    )
    assert value == 1


@pytest.mark.parametrize("fails", [False, True], ids=["durable", "store-down"])
def test_deliveries_sharing_a_commit_are_answered_only_after_it_and_all_of_them(
    fails: bool,
) -> None:
    """The listener awaits each delivery's commit on its event loop, and brings a batch's
    answers back from the committer thread together. The story this guards: answers
    handed over as a batch must still each wait for the write that holds them (none
    answered while the store is stalled), none may be dropped or crossed between
    connections, and a write that fails answers every delivery it held with 503."""
    metrics = fresh_metrics()
    store = GatedStore()
    if fails:
        store.fail = StateUnusableError("disk gone", path="state.db", code="io")
    receiver = WebhookReceiver(hook_config(), metrics, store=store)
    server = WebhookServer(receiver, metrics, "127.0.0.1", 0)
    server.start()
    answers: dict[int, int] = {}
    lock = threading.Lock()

    def send(job_id: int) -> None:
        raw = body("queued", job_id)
        status = post(server, raw, headers(raw, delivery=f"d-{job_id}")).status_code
        with lock:
            answers[job_id] = status

    senders = [threading.Thread(target=send, args=(job_id,)) for job_id in range(1, 41)]
    try:
        for thread in senders:
            thread.start()
        assert store.writing.wait(5)
        time.sleep(0.3)  # every delivery sent and waiting on the stalled write
        assert answers == {}, "answered before the write that holds it returned"
        store.gate.set()
        for thread in senders:
            thread.join(10)
    finally:
        server.stop()
        receiver.close()
    expected = 503 if fails else 202
    assert answers == dict.fromkeys(range(1, 41), expected)
    if not fails:
        assert sorted(j for batch in store.batches for j in batch) == list(range(1, 41))
        assert len(store.batches) < 40, "rows that waited together were written together"
