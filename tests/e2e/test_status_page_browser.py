"""The demo's page for on-call in a real headless browser (Debian's chromium).

The story: the demo runs (fake GitHub, moto, fleet emulator, the real controller); once its
spot GPU pool is out of capacity and CPU pools sit at their max, chromium loads ``/`` the
way a phone would. Its DOM holds every runner type and the causes (capacity_backoff for
the GPU type, naming the pool), no script element exists, and the screenshot is a real
rendering: the page's dark header at the top, many colours, not one flat colour.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.conftest import free_port, require_tool
from tests.e2e.harness import wait_for

pytestmark = pytest.mark.e2e

TYPES = (
    "linux.4xlarge",
    "linux.2xlarge",
    "linux.g5.4xlarge.nvidia.gpu",
    "linux.g4dn.12xlarge.nvidia.gpu",
)
HEADER = (31, 58, 95)  # the page header's background, #1f3a5f
PHONE = "412,915"
DEMO = (sys.executable, "-m", "autoscaler", "demo", "--duration", "90", "--tick", "1")


def chromium(tool: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            tool,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={PHONE}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _page_says(base: str, *needles: str) -> bool:
    try:
        text = httpx.get(f"{base}/?format=text", timeout=2).text
    except httpx.HTTPError:
        return False
    return all(n in text for n in needles)


def test_the_demo_page_in_a_headless_browser(tmp_path: Path) -> None:
    tool = require_tool("chromium")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    demo = subprocess.Popen(
        [*DEMO, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _page_says(base, "capacity_backoff: ci-gpu-spot"), 90, "capacity_backoff")
        dom = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            run = chromium(tool, tmp_path / "profile", "--dump-dom", f"{base}/")
            assert run.returncode == 0, run.stderr[-2000:]
            dom = run.stdout
            if 'data-code="capacity_backoff"' in dom:
                break
        shot = tmp_path / "page.png"
        run = chromium(tool, tmp_path / "profile", f"--screenshot={shot}", f"{base}/")
        assert run.returncode == 0, run.stderr[-2000:]
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=20)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()

    for name in TYPES:
        assert f'data-runner-type="{name}"' in dom, f"{name} missing from the DOM"
    gpu = dom.split('data-runner-type="linux.g5.4xlarge.nvidia.gpu"', 1)[1].split("</article>")[0]
    assert 'data-code="capacity_backoff"' in gpu
    assert re.search(r"ci-gpu-spot since \d\d:\d\d:\d\d UTC", gpu)
    assert "A pool is out of capacity and backed off" in gpu
    assert "<script" not in dom.lower()

    with Image.open(shot) as image:
        assert image.format == "PNG"
        rgb = image.convert("RGB")
    assert rgb.size == (412, 915)
    assert rgb.getpixel((8, 8)) == HEADER, "the header is not where the page puts it"
    colours = Counter(
        rgb.getpixel((x, y)) for y in range(0, rgb.height, 4) for x in range(0, rgb.width, 4)
    )
    assert len(colours) > 50, f"only {len(colours)} colours: a blank or flat screenshot"
    assert colours.most_common(1)[0][1] < 0.8 * sum(colours.values())
