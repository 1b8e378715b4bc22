"""Fixtures shared by the end-to-end tests of two controllers (tests/e2e/pair.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autoscaler.sim.fleet import reset_moto_server
from tests.conftest import moto_process


@pytest.fixture(scope="session")
def atomic_moto() -> Iterator[str]:
    """moto's server in a process of its own, one request at a time, per worker."""
    with moto_process(atomic=True) as endpoint:
        yield endpoint


@pytest.fixture
def moto(atomic_moto: str) -> str:
    """That server, emptied: its state is process-global, every test starts afresh."""
    reset_moto_server(atomic_moto)
    return atomic_moto
