"""Fixtures shared by the adapter tests of the state store port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.state.port import StateStore
from autoscaler.state.sqlite import SqliteStore
from tests.adapters.test_state_dynamodb import leading_store


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    """Each backend of the port in turn: SQLite, and DynamoDB on moto's server holding the
    lease (the requesting module provides the ``moto`` fixture)."""
    if request.param == "sqlite":
        s: StateStore = SqliteStore(tmp_path / "state.db")
    else:
        s = leading_store(request.getfixturevalue("moto"))
    yield s
    s.close()
