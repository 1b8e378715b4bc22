"""Shared test helpers. In CI (CI=true) a missing external tool fails instead of skipping."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from typing import NoReturn

import pytest


def missing(message: str) -> NoReturn:
    """Something a test needs is not on this machine: skip locally, fail in CI."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def require_tool(name: str) -> str:
    """The tool's path; skip when missing locally, fail when missing in CI."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed (.ci/run installs it)")
    return path


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """moto's server on 127.0.0.1 for one test module, its (process-global) state reset
    before and after."""
    from autoscaler.sim.fleet import reset_moto_server, start_moto_server  # noqa: PLC0415

    server, endpoint = start_moto_server()
    reset_moto_server(endpoint)
    try:
        yield endpoint
    finally:
        reset_moto_server(endpoint)
        server.stop()
