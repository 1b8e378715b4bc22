"""The `once` table when the poll failed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from autoscaler.app.report import format_table
from autoscaler.controller import TickResult
from autoscaler.domain import QueueSnapshot, QueueStats, RunnerCounts

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
SEEN = QueueSnapshot(T0, {"cpu": QueueStats("cpu", 2, 60.0, RunnerCounts(idle=1))}, 0, 0)


@pytest.mark.parametrize(
    ("snapshot", "says"),
    [(None, "(nothing seen yet)"), (SEEN, "(showing the last good picture)")],
    ids=["fresh-process", "earlier-picture"],
)
def test_a_failed_poll_says_what_the_table_shows(snapshot: QueueSnapshot | None, says: str) -> None:
    """Found running `once` against an unreachable GitHub: "poll failed: ... (showing the
    last good picture)" above an empty table. A fresh process has no earlier picture."""
    result = TickResult(now=T0, snapshot=snapshot, poll_error="TransientError: GitHub down")
    [line] = [ln for ln in format_table(result).splitlines() if ln.startswith("poll failed")]
    assert line == f"poll failed: TransientError: GitHub down {says}"
