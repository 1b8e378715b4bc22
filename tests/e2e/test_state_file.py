"""The real CLI on a bad state file.

Before: a corrupt or truncated file ended the alert stage in a sqlite3 traceback every
tick (``file is not a database``); a locked one in ``database is locked`` after 5 s,
every tick; a read-only one failed the alert stage every tick while ``/readyz`` said
ready. Now: one line naming the file and what to do, a count in
``ci_autoscaler_state_store_errors_total``, readiness failing while the store cannot be
written, and recovery without a restart once the file is fixed.

File modes do not bind root (CAP_DAC_OVERRIDE), so when the tests run as root the
read-only case runs the controller through ``setpriv`` without that capability.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.state.sqlite import SqliteStore
from tests.conftest import require_tool
from tests.e2e.harness import (
    cli,
    free_port,
    running_controller,
    seeded_github,
    wait_for,
    write_config,
)

ALERTS = {
    "rules": [
        {
            "name": "Jobs queueing too long",
            "team": "pytorch-dev-infra",
            "priority": "P2",
            "description": "Jobs wait too long for a runner",
            "max_queue_time": "60m",
            "receivers": ["hook"],
        }
    ],
    # nothing listens on the discard port: deliveries fail fast, and stay in the outbox
    "receivers": {"hook": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}},
    "builtin": {"unmatched_jobs": False},
}


def without_root_file_override() -> list[str]:
    """A command prefix under which file modes bind this process, root included."""
    if os.geteuid() != 0:
        return []
    setpriv = require_tool("setpriv")
    return [setpriv, "--inh-caps=-dac_override", "--bounding-set=-dac_override"]


def test_once_on_a_file_that_is_not_a_database_says_so_in_one_line(tmp_path: Path) -> None:
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=90)
    try:
        config = write_config(tmp_path, fake.url, free_port(), alerts=ALERTS)
        state = tmp_path / "state.db"
        state.write_text("runner_types:\n  cpu: {labels: [self-hosted]}\n" * 40)
        result = cli("once", "--config", str(config))
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr  # the poll worked; the table is printed
    assert "RUNNER TYPE" in result.stdout
    assert "Traceback" not in result.stderr
    [line] = [x for x in result.stderr.splitlines() if " ERROR " in x]
    assert f"state file {state} is not a SQLite database" in line
    assert "move the file aside" in line


def _errors(base: str, code: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "ci_autoscaler_state_store_errors"
        for s in f.samples
        if s.name.endswith("_total") and s.labels.get("code") == code
    )


def test_read_only_file_fails_readiness_until_it_is_writable_and_a_second_controller_is_told(
    tmp_path: Path,
) -> None:
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=90)
    state = tmp_path / "state.db"
    good = SqliteStore(state)
    good.load_states()  # a good file...
    good.close()
    state.chmod(0o444)  # ...that the controller may only read
    config = write_config(tmp_path, fake.url, free_port(), alerts=ALERTS)
    try:
        with running_controller(config, wrapper=without_root_file_override()) as (proc, base):
            wait_for(lambda: _errors(base, "read_only") >= 2, 20, "two failed saves")
            ready = httpx.get(f"{base}/readyz")
            assert ready.status_code == 503
            assert f"state: state file {state} is read-only" in ready.text

            state.chmod(0o644)  # the operator fixes the mode
            wait_for(lambda: httpx.get(f"{base}/readyz").status_code == 200, 20, "ready again")

            second = cli("once", "--config", str(config))  # the same state.path, meanwhile
            assert second.returncode == 0, second.stderr
            assert "Traceback" not in second.stderr
            [line] = [x for x in second.stderr.splitlines() if " ERROR " in x]
            assert f"state file {state} is locked by another process" in line
            assert "another ci-autoscaler is running" in line
            proc.terminate()
            assert proc.wait(10) == 0
            log = proc.stderr.read() if proc.stderr else ""
    finally:
        fake.stop()
    assert "Traceback" not in log
    lines = [x for x in log.splitlines() if "read-only" in x]
    # The file is in write-ahead-log mode, which SQLite cannot open without writing: the
    # GitHub cache (an optimisation) is not loaded either, and says so as a warning.
    cache = [x for x in lines if "GitHub cache not loaded" in x]
    assert all(" WARNING " in x for x in cache)
    told = [x for x in lines if x not in cache]
    assert told and all(" ERROR " in x and str(state) in x for x in told)
