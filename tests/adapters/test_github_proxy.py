"""GitHub through an egress proxy (``github.proxy``), a real forward proxy on loopback.

The story: the poll's HTTP helper moved from ``httpx.Client`` to httpx's transport (the
cold tick's CPU), and with it lost the client's implicit ``HTTPS_PROXY``: a controller in
a VPC whose only way out is an egress proxy could no longer reach GitHub, and nothing
said so but timeouts. The proxy is now a setting, and its credentials stay secret."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import GitHubConfig
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret, SecretUrl
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
CREDENTIALS = "egress-user:egress-pass-6c1f"


class ForwardProxy(ThreadingHTTPServer):
    """An HTTP forward proxy: absolute-URI requests in, forwarded, recorded."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.seen: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()


class _Forward(BaseHTTPRequestHandler):
    server: ForwardProxy

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.seen.append((self.path, self.headers.get("Proxy-Authorization")))
        headers = {
            k: v
            for k, v in self.headers.items()
            if k.lower() not in ("host", "proxy-authorization", "proxy-connection", "connection")
        }
        answer = httpx.get(self.path, headers=headers, timeout=10)
        body = answer.content
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in (
                "content-length",
                "transfer-encoding",
                "connection",
                "content-encoding",
            ):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    server = ForwardProxy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_every_github_request_goes_through_the_configured_proxy(
    proxy: ForwardProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeGitHub(clock=lambda: T0) as fake:
        fake.queue_job("app", ["self-hosted", "linux.4xlarge"])
        url = f"http://{CREDENTIALS}@127.0.0.1:{proxy.server_address[1]}"
        config = GitHubConfig(
            owner="demo-org", api_url=fake.url, token=Secret("fake-token"), proxy=SecretUrl(url)
        )
        source = GitHubSource(config, Metrics(CollectorRegistry()), sleep=lambda _s: None)
        try:
            observation = source.observe(T0)
        finally:
            source.close()
    assert len(observation.jobs) == 1
    with proxy.lock:
        seen = list(proxy.seen)
    assert seen, "no request reached the proxy"
    assert all(path.startswith(fake.url) for path, _ in seen)  # absolute URIs: proxied
    basic = "Basic " + base64.b64encode(CREDENTIALS.encode()).decode()
    assert {auth for _, auth in seen} == {basic}
    assert "egress-pass-6c1f" not in repr(config)
    assert "egress-pass-6c1f" not in caplog.text
