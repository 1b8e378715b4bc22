"""`ci-autoscaler run` killed with SIGKILL in the middle of a burst of webhook deliveries.

A delivery answered 2xx is one GitHub will never send again. So the listener may answer
only once the delivery's row is committed to the state file: a process killed right
after an answer must still have the row when it starts again. Deliveries are committed
in groups, so the test sends from many connections at once (every answer waits for a
shared commit), kills the process once a few hundred were answered, and then reads the
state file as the next start reads it. Every job with an answered delivery must be
there. Deliveries cut off by the kill may be there or not: GitHub redelivers them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import yaml

from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_webhooks import workflow_job_payload
from autoscaler.observe.github.webhooks import sign
from autoscaler.state.sqlite import SqliteStore
from tests.e2e.harness import CPU, free_port, wait_for, write_config

SECRET = "e2e-kill-secret-value"
JOBS = 3000
SENDERS = 16
#: Answers before the kill: enough that many group commits were answered.
KILL_AFTER = 400


def signed(payload: dict[str, object], delivery: str) -> tuple[dict[str, str], bytes]:
    body = json.dumps(payload).encode()
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "workflow_job",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(SECRET.encode(), body),
    }, body


def test_every_answered_delivery_survives_a_kill_9_mid_burst(tmp_path: Path) -> None:
    fake = FakeGitHub(owner="e2e-org", token="e2e-token")
    fake.start()
    fake.add_repo("app")
    hook_port = free_port()
    config = write_config(
        tmp_path,
        fake.url,
        free_port(),
        poll_interval="60s",
        runner_types={"linux.4xlarge": {"labels": CPU}},
        webhook={
            "listen": f"127.0.0.1:{hook_port}",
            "secret": "${E2E_HOOK_SECRET}",
            "reconcile_interval": "10m",
        },
    )
    base = f"http://127.0.0.1:{yaml.safe_load(config.read_text())['listen'].rsplit(':', 1)[1]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoscaler", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "E2E_TOKEN": "e2e-token", "E2E_HOOK_SECRET": SECRET},
    )
    try:
        wait_for(lambda: _healthy(base), 30, "controller /healthz")
        jobs = [fake.queue_job("app", CPU) for _ in range(JOBS)]
        requests = [
            (job, *signed(workflow_job_payload(fake, job, "queued"), f"kill-{job}")) for job in jobs
        ]
        answered: list[int] = []
        refused: list[tuple[int, int]] = []
        cut: list[int] = []
        lock = threading.Lock()
        killed = threading.Event()

        def send(share: list[tuple[int, dict[str, str], bytes]]) -> None:
            with httpx.Client(base_url=f"http://127.0.0.1:{hook_port}", timeout=30) as client:
                for job, headers, body in share:
                    try:
                        status = client.post("/github/webhook", headers=headers, content=body)
                    except httpx.TransportError:
                        with lock:
                            cut.append(job)
                        if killed.is_set():
                            return
                        continue
                    with lock:
                        if 200 <= status.status_code < 300:
                            answered.append(job)
                            if len(answered) >= KILL_AFTER and not killed.is_set():
                                proc.send_signal(signal.SIGKILL)
                                killed.set()
                        else:
                            refused.append((job, status.status_code))

        senders = [
            threading.Thread(target=send, args=(requests[i::SENDERS],)) for i in range(SENDERS)
        ]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join(120)
        assert proc.wait(30) == -signal.SIGKILL, "killed by the test, not ended on its own"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        fake.stop()

    assert refused == [], f"deliveries refused before the kill: {refused[:5]}"
    assert len(answered) >= KILL_AFTER
    assert len(answered) < JOBS, "the kill came after the burst, not in the middle of it"
    store = SqliteStore(tmp_path / "state.db")  # as the next start opens it
    try:
        stored = {row.job_id for row in store.load_job_index(time.time())}
    finally:
        store.close()
    lost = sorted(set(answered) - stored)
    assert lost == [], (
        f"{len(lost)} of {len(answered)} answered deliveries lost to the kill "
        f"({len(cut)} cut off unanswered, {len(stored)} rows in the file)"
    )


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
