"""The trace format: ISO or relative times, labels, durations; every bad line named."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from autoscaler.sim.trace import (
    DEFAULT_START,
    TraceError,
    parse_trace,
    read_trace,
    trace_line,
    write_trace,
)


def test_iso_times_count_from_midnight_of_the_first_day_and_numbers_from_there() -> None:
    trace = parse_trace(
        [
            '{"created_at": "2026-12-01T03:12:00Z", "labels": ["Self-Hosted", "GPU"],'
            ' "duration": 1260}',
            "",
            '{"created_at": 60, "labels": ["self-hosted"], "duration": 5, "queue_seconds": 9}',
        ]
    )
    assert trace.start == datetime(2026, 12, 1, tzinfo=UTC)
    assert [(j.created_at, j.duration) for j in trace.jobs] == [(60.0, 5.0), (11520.0, 1260.0)]
    assert trace.jobs[1].labels == frozenset({"self-hosted", "gpu"})  # case-insensitive
    assert trace.span == 11520.0


def test_relative_times_only_start_on_a_monday() -> None:
    trace = parse_trace(['{"created_at": 0, "labels": [], "duration": 1}'])
    assert trace.start == DEFAULT_START and DEFAULT_START.weekday() == 0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "Expecting value"),
        ("[1, 2]", "not a JSON object"),
        ('{"created_at": "yesterday", "labels": [], "duration": 1}', "not an ISO-8601 time"),
        ('{"created_at": -5, "labels": [], "duration": 1}', ">= 0 seconds"),
        ('{"created_at": true, "labels": [], "duration": 1}', "ISO-8601 time or seconds"),
        ('{"created_at": 0, "labels": "gpu", "duration": 1}', "labels must be a list"),
        ('{"created_at": 0, "labels": [], "duration": -1}', "duration must be"),
        ('{"created_at": 0, "labels": []}', "duration must be"),
    ],
    ids=["json", "array", "bad-time", "negative", "bool", "labels", "negative-duration", "missing"],
)
def test_a_bad_line_is_named_with_its_number(line: str, message: str) -> None:
    good = '{"created_at": 0, "labels": [], "duration": 1}'
    with pytest.raises(TraceError) as err:
        parse_trace([good, line], source="t.jsonl")
    assert len(err.value.problems) == 1
    assert err.value.problems[0].startswith("t.jsonl:2: ") and message in err.value.problems[0]


def test_every_bad_line_is_reported_at_once_up_to_a_limit() -> None:
    with pytest.raises(TraceError) as err:
        parse_trace(["nope"] * 50)
    assert len(err.value.problems) == 20
    assert "more bad lines" in err.value.problems[-1]


def test_written_trace_reads_back_the_same(tmp_path: Path) -> None:
    original = parse_trace(
        [
            json.dumps({"created_at": 0.5, "labels": ["b", "a"], "duration": 10}),
            json.dumps({"created_at": 7200, "labels": ["a"], "duration": 3600}),
        ]
    )
    out = io.StringIO()
    assert write_trace(original, out) == 2
    path = tmp_path / "t.jsonl"
    path.write_text(out.getvalue())
    assert read_trace(path) == original


def test_an_unreadable_file_is_one_problem(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "missing.jsonl")


def test_trace_line_keeps_extra_informative_keys() -> None:
    line = trace_line(datetime(2026, 11, 30, 3, tzinfo=UTC), ["x"], 12.0, queue_seconds=4.0)
    assert json.loads(line) == {
        "created_at": "2026-11-30T03:00:00Z",
        "labels": ["x"],
        "duration": 12.0,
        "queue_seconds": 4.0,
    }
