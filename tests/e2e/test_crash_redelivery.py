"""The real CLI killed mid-delivery, and `once` next to a receiver that never answers.

A webhook receiver on 127.0.0.1 and the fake GitHub (for the ``github_issue`` receiver)
each hold their first request until both have arrived; then the test kills
``ci-autoscaler once`` with SIGKILL, after each receiver acted (the webhook got its
FIRING, GitHub opened the issue) and before the controller heard back and deleted the
notifications from its outbox. That is the crash the issue reproduced with 21 kills.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from autoscaler.alerting.store import OutboxItem
from autoscaler.state.sqlite import SqliteStore
from tests.e2e.harness import cli, free_port, seeded_github, write_config

RULE = {
    "name": "Jobs queueing too long",
    "team": "pytorch-dev-infra",
    "priority": "P2",
    "description": "Jobs wait too long for a runner",
    "max_queue_time": "60m",
}


def outbox(path: Path) -> list[OutboxItem]:
    """What the state file still owes (opened and closed again: it holds a lock)."""
    store = SqliteStore(path)
    try:
        return store.pending()
    finally:
        store.close()


@contextmanager
def webhook_receiver(
    on_request: Callable[[dict[str, Any]], bool],
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook on port 0 recording every JSON body; ``on_request(body)`` True drops the
    connection unanswered."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append(body)
            if on_request(body):
                self.close_connection = True
                return
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def test_kill_9_between_delivery_and_outbox_delete(tmp_path: Path) -> None:
    """After the crash both notifications go again (at least once): the webhook's
    duplicate carries the same event_id, so the receiver can drop it, and the github_issue
    receiver finds the issue its lost create opened instead of opening a second one."""
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=90)
    victim: list[subprocess.Popen[str]] = []

    def kill() -> None:
        victim[0].send_signal(signal.SIGKILL)
        victim[0].wait(10)

    both_delivered = threading.Barrier(2, action=kill, timeout=60)

    def hold_first(_: dict[str, Any]) -> bool:
        if victim and victim[0].returncode is None:
            both_delivered.wait()
            return True
        return False

    def hold_first_create(method: str, path: str, status: int) -> bool:
        if method == "POST" and path.endswith("/issues") and victim[0].returncode is None:
            both_delivered.wait()
            return True
        return False

    fake.before_reply = hold_first_create
    try:
        with webhook_receiver(hold_first) as (hook_url, received):
            config = write_config(
                tmp_path,
                fake.url,
                free_port(),
                alerts={
                    "rules": [{**RULE, "receivers": ["hook", "issues"]}],
                    "receivers": {
                        "hook": {"type": "webhook", "url": hook_url},
                        "issues": {"type": "github_issue", "repo": "e2e-org/app"},
                    },
                    "builtin": {"unmatched_jobs": False},
                },
            )
            victim.append(
                subprocess.Popen(
                    [sys.executable, "-m", "autoscaler", "once", "--config", str(config)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    env={**os.environ, "E2E_TOKEN": "e2e-token"},
                )
            )
            assert victim[0].wait(60) == -signal.SIGKILL
            assert [b["state"] for b in received] == ["FIRING"]
            assert len(fake.issues("app")) == 1
            owed = [(i.receiver, i.notification.status) for i in outbox(tmp_path / "state.db")]
            assert sorted(owed) == [("hook", "FIRING"), ("issues", "FIRING")], (
                "killed before the outbox deletes: both notifications still owed"
            )

            again = cli("once", "--config", str(config))
            assert again.returncode == 0, again.stderr
            assert "Traceback" not in again.stderr
    finally:
        fake.stop()

    first, duplicate = received
    assert duplicate["state"] == "FIRING"
    assert duplicate["event_id"] == first["event_id"]
    assert duplicate["fingerprint"] == first["fingerprint"]
    [issue] = fake.issues("app")
    assert issue.state == "open" and issue.comments == []
    assert f"event_id={first['event_id']}" in (issue.body or "")
    creates = [r for r in fake.requests if r.method == "POST" and r.path.endswith("/issues")]
    assert len(creates) == 1
    assert outbox(tmp_path / "state.db") == []
    store = SqliteStore(tmp_path / "state.db")
    try:
        assert store.issue_number("issues", first["fingerprint"]) == issue.number
    finally:
        store.close()


@contextmanager
def tarpit() -> Iterator[str]:
    """A receiver that accepts every connection and never answers a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def test_once_exits_within_the_delivery_deadline_next_to_a_hung_receiver(tmp_path: Path) -> None:
    """Before: `once` printed its table and then hung until the hung receiver's worker
    thread had spent timeout x attempts (3 x 20 s plus backoffs here), because the pool's
    threads were joined at exit. Now it waits at most the delivery round's own deadline
    (10 s) and leaves the notification in the outbox for the next start."""
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=90)
    try:
        with tarpit() as url:
            config = write_config(
                tmp_path,
                fake.url,
                free_port(),
                alerts={
                    "rules": [{**RULE, "receivers": ["hung"]}],
                    "receivers": {
                        "hung": {"type": "webhook", "url": url, "timeout": "20s", "max_attempts": 3}
                    },
                    "builtin": {"unmatched_jobs": False},
                },
            )
            started = time.monotonic()
            result = cli("once", "--config", str(config), timeout=120)
            elapsed = time.monotonic() - started
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    assert elapsed < 30, f"once took {elapsed:.1f}s next to a hung receiver"
    assert "to hung failed (timed out)" in result.stderr
    assert [i.receiver for i in outbox(tmp_path / "state.db")] == ["hung"]
