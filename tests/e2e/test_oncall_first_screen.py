"""The page for on-call as the person paged first sees it: Chromium at 1400x1000, the text
actually rendered above the fold, read through the DevTools protocol (the page itself
runs no script: its Content-Security-Policy forbids any).

Story: the page opened on firing-alert cards with no "firing since" and no runbook link,
a Reason line of raw flags, and the per-type queue numbers below the fold in one narrow
column. With eight runner types, every type's queued count and top cause, and each firing
alert's age and runbook link, must now be on the first screen."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import websocket

from autoscaler.config.alerts import DEFAULT_RUNBOOK_BASE_URL
from autoscaler.fakes.github import FakeGitHub
from tests.conftest import free_port, require_tool
from tests.e2e.harness import running_controller, wait_for, write_config

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 1400, 1000
TYPES = [f"linux.type{i}.{size}xlarge" for i, size in enumerate((2, 4, 8, 12, 16, 24, 32, 48))]
#: The runbook page of the docs site, where every alert links by default.
RUNBOOK = DEFAULT_RUNBOOK_BASE_URL

#: Text nodes inside the viewport, in document order, with the links whose box is inside.
ABOVE_THE_FOLD = """(() => {
  const h = window.innerHeight, out = [], links = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (!n.textContent.trim()) continue;
    const r = document.createRange(); r.selectNodeContents(n);
    const box = r.getBoundingClientRect();
    if (box.height > 0 && box.top >= 0 && box.bottom <= h) out.push(n.textContent.trim());
  }
  for (const a of document.querySelectorAll('a')) {
    const box = a.getBoundingClientRect();
    if (box.height > 0 && box.bottom <= h) links.push([a.className, a.getAttribute('href')]);
  }
  return JSON.stringify({text: out.join(' | '), links: links, height: h, width: innerWidth});
})()"""


def github() -> FakeGitHub:
    fake = FakeGitHub(owner="e2e-org", token="e2e-token")
    fake.start()
    fake.add_repo("app")
    now = datetime.now(UTC)
    for i, name in enumerate(TYPES):
        for _ in range(i + 1):
            fake.queue_job("app", ["self-hosted", name], created_at=now - timedelta(minutes=12))
    # one type waits past the shipped rule's hour; one job asks for a label nobody serves
    fake.queue_job("app", ["self-hosted", TYPES[0]], created_at=now - timedelta(minutes=75))
    fake.queue_job("app", ["self-hosted", "linux.nobody"], created_at=now - timedelta(minutes=20))
    return fake


@pytest.fixture
def page(tmp_path: Path) -> Iterator[str]:
    fake = github()
    try:
        port = free_port()
        config = write_config(
            tmp_path,
            fake.url,
            port,
            runner_types={name: {"labels": ["self-hosted", name]} for name in TYPES},
            alerts={
                "receivers": {"hook": {"type": "webhook", "url": "http://127.0.0.1:9"}},
                "builtin": {"dashboard_url": "https://grafana.example/d/ci"},
            },
        )
        with running_controller(config) as (_, base):
            wait_for(lambda: _firing(base) >= 2, 60, "two alerts firing")
            yield base
    finally:
        fake.stop()


def _firing(base: str) -> int:
    try:
        return httpx.get(f"{base}/?format=text", timeout=2).text.count("\nFIRING ")
    except httpx.HTTPError:
        return 0


class DevTools:
    """One page target of a headless Chromium, over its DevTools websocket."""

    def __init__(self, url: str) -> None:
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                result: dict[str, Any] = message["result"]
                return result


def rendered(tool: str, profile: Path, url: str) -> dict[str, Any]:
    port = free_port()
    browser = subprocess.Popen(
        [
            tool,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--remote-debugging-port={port}",
            f"--window-size={WIDTH},{HEIGHT}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        targets: list[dict[str, Any]] = []

        def pages() -> bool:
            nonlocal targets
            try:
                targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return False
            return any(t.get("type") == "page" for t in targets)

        wait_for(pages, 30, "chromium's DevTools")
        target = next(t for t in targets if t.get("type") == "page")
        tools = DevTools(target["webSocketDebuggerUrl"])
        tools.call(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=HEIGHT,
            deviceScaleFactor=1,
            mobile=False,
        )
        tools.call("Page.enable")
        tools.call("Page.navigate", url=url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = tools.call("Runtime.evaluate", expression="document.readyState")
            if state["result"]["value"] == "complete":
                break
            time.sleep(0.2)
        answer = tools.call("Runtime.evaluate", expression=ABOVE_THE_FOLD, returnByValue=True)
        found: dict[str, Any] = json.loads(answer["result"]["value"])
        return found
    finally:
        browser.terminate()
        browser.wait(timeout=20)


def runbook_anchors() -> set[str]:
    """The explicit anchors (``{#id}``) of the runbook page's headings."""
    text = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    return set(re.findall(r"^#+ .*\{#([^}]+)\}\s*$", text, re.MULTILINE))


def test_first_screen_holds_every_type_and_every_firing_alert(page: str, tmp_path: Path) -> None:
    tool = require_tool("chromium")
    seen = rendered(tool, tmp_path / "profile", f"{page}/")
    assert (seen["width"], seen["height"]) == (WIDTH, HEIGHT)
    text = seen["text"]
    for i, name in enumerate(TYPES):
        row = re.search(re.escape(name) + r" \| (\d+) \| .*?\| ([^|]+) \| scaling_disabled", text)
        assert row, f"{name}: no row with its queue and top cause above the fold\n{text}"
        assert int(row.group(1)) == i + 1 + (1 if i == 0 else 0)
        assert row.group(2).strip() == "Nothing scales this runner type"
    titles = ["[P2] Jobs queueing too long", "[P2] Jobs no runner type serves"]
    for title in titles:
        assert title in text, f"{title} not above the fold\n{text}"
    assert len(re.findall(r"firing for \d+s", text)) >= len(titles), text
    assert "Reason: max queue size 8, max queue time 75m; tripped: queue time" in text
    runbooks = [href for cls, href in seen["links"] if cls == "runbook"]
    assert len(runbooks) >= len(titles), seen["links"]
    for href in runbooks:
        assert href.startswith(RUNBOOK + "#")
        assert href.split("#", 1)[1] in runbook_anchors(), f"{href}: no such runbook section"
