"""A bad state file is one clear message, a metric and unreadiness.

The story: a state file left truncated by a full disk, or overwritten by something that is
not a database, ended every tick of the alerting stage in a raw sqlite3 traceback
(``file is not a database``); a file locked by a second controller on the same volume gave
``database is locked`` after sqlite's 5 s busy wait, every tick, with no hint that two
controllers were running; a read-only one failed the stage every tick while ``/readyz``
still answered ready. Now the store translates sqlite3 errors at its edge into
StateError (``autoscaler/state/sqlite_errors.py``), the alert stage logs one line
naming the file and what to do, counts it, and reports into the controller's health so
readiness fails until a save works again; fixing the file needs no restart.

Real SQLite files throughout. (A read-only *file* needs a non-root process: that case runs
as a subprocess in ``tests/e2e/test_state_file.py``; here SQLite's own read-only mode
produces the same SQLITE_READONLY error for the classification table.)
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.alerting.engine import AlertEngine
from autoscaler.alerting.evaluation import FLEET, Evaluation
from autoscaler.alerting.lifecycle import Notification
from autoscaler.config import (
    AlertRuleConfig,
    AlertsConfig,
    BuiltinAlertsConfig,
    ReceiverConfig,
)
from autoscaler.controller import Controller
from autoscaler.domain import Observation
from autoscaler.errors import StateError, StateLockedError, StateUnusableError
from autoscaler.health import Health
from autoscaler.secrets import SecretUrl
from autoscaler.state.sqlite import SqliteStore
from autoscaler.state.sqlite_errors import translate
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine, load_config, paging
from tests.unit.test_controller import FakeSource, observation

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
RULE = AlertRuleConfig(
    name="Jobs queueing too long",
    team="dev-infra",
    priority="P2",
    description="d",
    receivers=(),
    max_queue_size=3,
)
ALERTS = AlertsConfig(
    rules=(RULE,), builtin=BuiltinAlertsConfig(unmatched_jobs=False, github_unreachable_after=0)
)


def good_file(path: Path, rows: int = 200) -> Path:
    """A real state file with an outbox big enough to span many pages."""
    ev = Evaluation("r", FLEET, "t", "P2", "x" * 400, (), {"threshold_breached": 1})
    store = SqliteStore(path)
    store.save({}, [("hook", Notification("FIRING", ev, started_at=T0, created_at=T0))] * rows)
    store.close()
    return path


def _text(path: Path) -> None:
    path.write_text("this was a config file, copied to the wrong place\n" * 50)


def _truncated(path: Path) -> None:
    data = good_file(path).read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _header_only(path: Path) -> None:
    path.write_bytes(good_file(path).read_bytes()[:100])


def _garbled_pages(path: Path) -> None:
    data = good_file(path).read_bytes()
    path.write_bytes(data[:4096] + bytes(range(256)) * ((len(data) - 4096) // 256))


def _directory(path: Path) -> None:
    path.mkdir()


def _parent_is_a_file(path: Path) -> None:
    path.parent.parent.mkdir()
    path.parent.write_text("a file where the state directory should be")


BAD_FILES: list[tuple[str, Callable[[Path], None], str, str]] = [
    ("text-file", _text, "not_a_database", "move the file aside"),
    ("truncated", _truncated, "corrupt", "move the file aside"),
    ("header-only", _header_only, "corrupt", "move the file aside"),
    ("garbled-pages", _garbled_pages, "corrupt", "move the file aside"),
    ("a-directory", _directory, "cannot_open", "state.path"),
    ("parent-is-a-file", _parent_is_a_file, "cannot_open", "state.path"),
]


def _target(tmp_path: Path, row_id: str) -> Path:
    if row_id == "parent-is-a-file":
        return tmp_path / "d" / "blocker" / "state.db"
    return tmp_path / "state.db"


@pytest.mark.parametrize(
    ("make", "code", "remedy"),
    [pytest.param(make, code, remedy, id=name) for name, make, code, remedy in BAD_FILES],
)
def test_a_bad_file_is_one_clear_error_naming_it(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    make: Callable[[Path], None],
    code: str,
    remedy: str,
) -> None:
    path = _target(tmp_path, request.node.callspec.id)
    make(path)
    store = SqliteStore(path)
    with pytest.raises(StateError) as info:
        store.load_states()
        store.pending()  # corruption in later pages shows when they are read
    error = info.value
    assert (type(error), error.code) == (StateUnusableError, code)
    assert str(path) in str(error) and remedy in str(error)
    assert "\n" not in str(error)


def _real_sqlite_error(tmp_path: Path, kind: str) -> sqlite3.Error:
    """Make SQLite itself raise the error ``kind`` on a real file."""
    db = good_file(tmp_path / f"{kind}.db", rows=1)
    try:
        if kind == "read_only":
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            conn.execute("INSERT INTO issues VALUES ('r', 'f', 1)")
        elif kind == "locked":
            holder = sqlite3.connect(db)  # held as a running controller holds it
            holder.execute("PRAGMA locking_mode = EXCLUSIVE")
            holder.execute("BEGIN EXCLUSIVE")
            sqlite3.connect(db, timeout=0.05).execute("SELECT * FROM alerts").fetchall()
        elif kind == "not_a_database":
            _text(db)
            sqlite3.connect(db).execute("SELECT * FROM alerts")
        elif kind == "cannot_open":
            sqlite3.connect(tmp_path / "missing" / "x.db")
    except sqlite3.Error as exc:
        return exc
    raise AssertionError(f"SQLite raised nothing for {kind}")


@pytest.mark.parametrize("kind", ["read_only", "locked", "not_a_database", "cannot_open"])
def test_real_sqlite_errors_are_classified_by_result_code(tmp_path: Path, kind: str) -> None:
    exc = _real_sqlite_error(tmp_path, kind)
    error = translate(exc, "/var/lib/ci-autoscaler/state.db", "save")
    assert error.code == kind
    assert error.operation == "save"
    assert "/var/lib/ci-autoscaler/state.db" in str(error)
    expected = StateLockedError if kind == "locked" else StateUnusableError
    assert type(error) is expected


def test_a_second_controller_on_the_same_file_is_told_the_first_one_runs(tmp_path: Path) -> None:
    """The first controller holds the file for its lifetime; the second fails fast (not
    after 5 s, every tick) with a message that says what is going on, and gets the file
    once the first one stops, without a restart."""
    path = tmp_path / "state.db"
    first = SqliteStore(path)
    first.load_states()
    second = SqliteStore(path, lock_timeout=0.1)
    with pytest.raises(StateLockedError) as info:
        second.load_states()
    assert "another ci-autoscaler is running" in str(info.value)
    assert str(path) in str(info.value)
    first.close()
    assert second.load_states() == {}
    second.close()


def engine_over(store: SqliteStore, health: Health) -> tuple[AlertEngine, Metrics]:
    metrics = Metrics(CollectorRegistry())
    return alert_engine(ALERTS, store=store, metrics=metrics, health=health), metrics


def controller_with(engine: AlertEngine, health: Health) -> Controller:
    config = load_config(
        poll_interval="30s", runner_types={"cpu": {"labels": ["self-hosted", "cpu"]}}
    )
    script: list[Observation] = [observation(5, T0 + timedelta(minutes=m)) for m in range(4)]
    return Controller(config, FakeSource(script), engine.metrics, alerts=engine, health=health)


def test_a_locked_file_fails_readiness_until_it_is_free(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.db"
    other = SqliteStore(path)  # another controller
    other.load_states()
    health = Health()
    engine, metrics = engine_over(SqliteStore(path, lock_timeout=0.05), health)
    controller = controller_with(engine, health)

    with caplog.at_level(logging.ERROR):
        result = controller.tick(T0)
    assert result.alerts == []
    assert not controller.ready(T0)
    [reason] = controller.not_ready_reasons(T0)
    assert reason.startswith(f"state: state file {path} is locked")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None  # one line, no traceback
    assert "another ci-autoscaler is running" in errors[0].getMessage()
    count = metrics.registry.get_sample_value(
        "ci_autoscaler_state_store_errors_total", {"operation": "open", "code": "locked"}
    )
    assert count == 1
    assert (
        metrics.registry.get_sample_value(
            "ci_autoscaler_stage_failures_total", {"stage": "alerting"}
        )
        == 1
    )

    other.close()  # the other controller stopped
    now = T0 + timedelta(minutes=1)
    assert [a.state for a in controller.tick(now).alerts] == ["firing"]
    assert controller.ready(now) and controller.not_ready_reasons(now) == []


def test_a_corrupt_file_moved_aside_recovers_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _text(path)
    health = Health()
    engine, _ = engine_over(SqliteStore(path), health)
    controller = controller_with(engine, health)
    controller.tick(T0)
    assert "is not a SQLite database" in health.problems()["state"]
    assert not controller.ready(T0)

    path.rename(tmp_path / "state.db.corrupt")  # what the message tells the operator to do
    now = T0 + timedelta(minutes=1)
    assert [a.state for a in controller.tick(now).alerts] == ["firing"]
    assert health.problems() == {} and controller.ready(now)
    assert os.path.getsize(path) > 0


class ReadOnlyStore(SqliteStore):
    """Reads work; saves fail exactly as on a read-only file (SQLite's own error,
    translated), until ``writable``. Root ignores file modes, so the e2e test covers the
    real read-only file."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writable = False
        self._readonly_error = _real_sqlite_error(path.parent, "read_only")

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.writable:
            raise translate(self._readonly_error, self.path, "save")
        super().save(*args, **kwargs)


def test_a_failed_save_sends_nothing_and_decides_again(tmp_path: Path) -> None:
    """What cannot be recorded is not sent (it would go out again every tick); the stored
    state did not move, so the first tick that can save sends the FIRING, once."""
    sent: list[str] = []

    def receiver(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content)["state"])
        return httpx.Response(200)

    hook = ReceiverConfig(name="hook", type="webhook", url=SecretUrl("http://127.0.0.1:9/hook"))
    alerts = ALERTS.model_copy(
        update={
            "rules": (RULE.model_copy(update={"receivers": ("hook",)}),),
            "receivers": {"hook": hook},
        }
    )
    health = Health()
    store = ReadOnlyStore(tmp_path / "state.db")
    quiet = {"sleep": lambda _: None}
    with paging(alerts, receiver, store=store, deliverer=quiet, health=health) as (engine, d):
        controller = controller_with(engine, health)
        for minute in range(3):
            controller.tick(T0 + timedelta(minutes=minute))
            d.flush(5.0)
        assert sent == []
        assert "is read-only" in health.problems()["state"]
        failures = engine.metrics.registry.get_sample_value(
            "ci_autoscaler_state_store_errors_total", {"operation": "save", "code": "read_only"}
        )
        assert failures == 3

        store.writable = True  # the operator fixed the file's mode
        controller.tick(T0 + timedelta(minutes=3))
        d.flush(5.0)
        controller.tick(T0 + timedelta(minutes=4))
        d.flush(5.0)
        assert sent == ["FIRING"]
        assert controller.ready(T0 + timedelta(minutes=4))
