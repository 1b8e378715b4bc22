"""The pure core imports no I/O library: httpx, boto3 and prometheus_client stay in adapters."""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE = [
    "autoscaler.domain",
    "autoscaler.queue",
    "autoscaler.controller",
    "autoscaler.policy",
    "autoscaler.plan",
    "autoscaler.capacity",
    "autoscaler.schedule",
    "autoscaler.alerting.rules",
    "autoscaler.alerting.lifecycle",
]
FORBIDDEN = ("httpx", "boto3", "botocore", "prometheus_client")


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io_library(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"{module} pulls in {out}"
