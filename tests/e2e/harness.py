"""Helpers for end-to-end tests: a fake GitHub with a queue, and `ci-autoscaler run` as a
real subprocess serving on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import yaml

from autoscaler.fakes.github import FakeGitHub
from tests.conftest import free_port

CPU = ["self-hosted", "linux.4xlarge"]
GPU = ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]


def seeded_github(*, gpu_jobs: int = 3, gpu_age_minutes: float = 90) -> FakeGitHub:
    """A started fake GitHub with a CPU runner, queued CPU jobs and old queued GPU jobs."""
    fake = FakeGitHub(owner="e2e-org", token="e2e-token")
    fake.start()
    fake.add_repo("app")
    now = datetime.now(UTC)
    fake.register_runner("ci-cpu-i-0000000000000001", CPU)
    for _ in range(2):
        fake.queue_job("app", CPU, created_at=now - timedelta(minutes=2))
    for _ in range(gpu_jobs):
        fake.queue_job("app", GPU, created_at=now - timedelta(minutes=gpu_age_minutes))
    return fake


#: For a config run one tick at a time (``once``, ``explain``): the poll may take 0.8 of the
#: interval, and at 1 s a loaded machine cut the only tick's poll before the GPU jobs' run
#: was listed (0 queued, no alert). The interval is otherwise unused by one tick.
ONE_TICK = {"poll_interval": "30s"}


def write_config(tmp: Path, github_url: str, port: int, **extra: object) -> Path:
    doc: dict[str, object] = {
        "poll_interval": "1s",
        "listen": f"127.0.0.1:{port}",
        "github": {"api_url": github_url, "owner": "e2e-org", "token": "${E2E_TOKEN}"},
        "runner_types": {
            "linux.4xlarge": {"labels": CPU},
            "linux.g5.4xlarge.nvidia.gpu": {"labels": GPU},
        },
        "scaling": {"enabled": False},
        "state": {"path": str(tmp / "state.db")},
    }
    doc.update(extra)
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "E2E_TOKEN": "e2e-token", **(env or {})},
        check=False,
    )


@contextmanager
def running_controller(
    config: Path, *, wrapper: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`ci-autoscaler run` in a subprocess; yields (process, base url) once /healthz answers.
    ``wrapper`` prefixes the command (e.g. ``setpriv`` dropping capabilities)."""
    port = yaml.safe_load(config.read_text())["listen"].rsplit(":", 1)[1]
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*wrapper, sys.executable, "-m", "autoscaler", "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "E2E_TOKEN": "e2e-token"},
    )
    try:
        wait_for(lambda: _ok(f"{base}/healthz"), 20, "controller /healthz")
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(check: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")


__all__ = ["cli", "free_port", "running_controller", "seeded_github", "wait_for", "write_config"]
