"""A real Alertmanager (Debian's ``prometheus-alertmanager``) on 127.0.0.1 for one test,
and an inbox: the webhook receiver Alertmanager itself notifies, so a test sees what
on-call would be sent (firing, then resolved)."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.conftest import free_port, require_tool
from tests.e2e.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]
ALERTS_DOC = ROOT / "docs" / "alerts.md"


def docs_yaml(marker: str) -> dict[str, Any]:
    """The first ```yaml block after ``<!-- marker -->`` in docs/alerts.md, parsed: the
    tests run the docs' own configuration, so wrong docs fail them."""
    text = ALERTS_DOC.read_text(encoding="utf-8")
    _, found, after = text.partition(f"<!-- {marker} -->")
    assert found, f"docs/alerts.md has no <!-- {marker} --> block"
    body = after.split("```yaml\n", 1)[1].split("```", 1)[0]
    doc = yaml.safe_load(body)
    assert isinstance(doc, dict)
    return doc


@dataclass
class Inbox:
    """Records the JSON bodies POSTed to it (Alertmanager's webhook notifications)."""

    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def alerts(self, alertname: str, status: str) -> list[dict[str, Any]]:
        with self.lock:
            return [
                a
                for body in self.bodies
                for a in body.get("alerts", [])
                if a["labels"].get("alertname") == alertname and a["status"] == status
            ]


@contextmanager
def inbox() -> Iterator[Inbox]:
    box = Inbox()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            with box.lock:
                box.bodies.append(body)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    box.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield box
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Alertmanager:
    url: str
    """Base URL, ``http://127.0.0.1:PORT``."""

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds now: its API lists no alert whose ``endsAt`` has
        passed (resolved or expired); ``status.state`` says active/suppressed."""
        try:
            got = httpx.get(f"{self.url}/api/v2/alerts", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return []
        assert isinstance(got, list)
        return got


def fast(config: dict[str, Any], hook: str, resolve_timeout: str = "1s") -> dict[str, Any]:
    """An alertmanager.yml made test-fast: short timings, every webhook to ``hook``."""
    config.setdefault("global", {})["resolve_timeout"] = resolve_timeout

    def speed(route: dict[str, Any]) -> None:
        route.update(group_wait="0s", group_interval="1s", repeat_interval="1h")
        for child in route.get("routes", []):
            speed(child)

    speed(config["route"])
    for receiver in config.get("receivers", []):
        for hook_config in receiver.get("webhook_configs", []):
            hook_config["url"] = hook
    return config


@contextmanager
def alertmanager(tmp: Path, config: dict[str, Any], name: str = "am") -> Iterator[Alertmanager]:
    """``prometheus-alertmanager`` with ``config``, its own storage, clustering off (no
    fixed gossip port), on a free port; stopped afterwards."""
    binary = require_tool("prometheus-alertmanager")
    amtool = require_tool("amtool")
    path = tmp / f"{name}.yml"
    path.write_text(yaml.safe_dump(config))
    check = subprocess.run(
        [amtool, "check-config", str(path)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    port = free_port()
    log = tmp / f"{name}.log"
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={path}",
            f"--storage.path={tmp / (name + '-data')}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    running = Alertmanager(f"http://127.0.0.1:{port}")
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"alertmanager exited: {log.read_text()[-2000:]}")
            try:
                return httpx.get(f"{running.url}/-/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, 15, "alertmanager /-/ready")
        yield running
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
