"""The CLI end to end against the fake GitHub over real HTTP."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import (
    ONE_TICK,
    cli,
    free_port,
    running_controller,
    seeded_github,
    wait_for,
    write_config,
)

METRICS_REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md"

DESIGN_METRICS = {
    "ci_autoscaler_queue_size",
    "ci_autoscaler_queue_max_age_seconds",
    "ci_autoscaler_runners",
    "ci_autoscaler_pool_desired_capacity",
    "ci_autoscaler_pool_instances",
    "ci_autoscaler_alerts_firing",
    "ci_autoscaler_last_successful_poll_timestamp_seconds",
}


def test_check_config_exit_codes(tmp_path: Path) -> None:
    good = write_config(tmp_path, "http://127.0.0.1:1", free_port())
    assert cli("check-config", str(good)).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("github: {owner: x, tokn: y}\nrunner_types: {gpu: {labels: []}}\n")
    result = cli("check-config", str(bad))
    assert result.returncode == 1
    assert "github.tokn: unknown key (did you mean 'token'?)" in result.stderr
    assert "runner_types.gpu.labels: must be a non-empty list" in result.stderr
    assert result.stdout == ""


def test_once_json_is_the_only_thing_on_stdout(tmp_path: Path) -> None:
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=90)
    try:
        config = write_config(tmp_path, fake.url, free_port(), **ONE_TICK)
        result = cli("--log-level", "info", "once", "--config", str(config), "--output", "json")
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    types = {t["name"]: t for t in doc["runner_types"]}
    assert types["linux.4xlarge"]["queue_size"] == 2
    assert types["linux.4xlarge"]["runners"] == {"idle": 1, "busy": 0, "offline": 0}
    gpu = types["linux.g5.4xlarge.nvidia.gpu"]
    assert gpu["queue_size"] == 3
    assert 89 * 60 < gpu["max_queue_time_seconds"] < 92 * 60
    assert doc["unmatched_jobs"] == 0
    assert doc["observed_at"].endswith("+00:00")
    assert "e2e-token" not in result.stdout + result.stderr


def test_once_table_is_aligned(tmp_path: Path) -> None:
    fake = seeded_github()
    try:
        config = write_config(tmp_path, fake.url, free_port(), **ONE_TICK)
        result = cli("once", "--config", str(config))
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("RUNNER TYPE"))
    row = next(line for line in lines if line.startswith("linux.g5.4xlarge.nvidia.gpu"))
    assert header.index("QUEUED") + len("QUEUED") == row.index(" 3 ") + 2


def test_run_serves_metrics_health_readiness_and_stops_on_sigterm(tmp_path: Path) -> None:
    fake = seeded_github()
    try:
        config = write_config(tmp_path, fake.url, free_port())
        with running_controller(config) as (proc, base):
            wait_for(lambda: httpx.get(f"{base}/readyz").status_code == 200, 20, "readiness")
            text = httpx.get(f"{base}/metrics").text
            names = {f.name for f in text_string_to_metric_families(text)}
            # prometheus_client strips _total from counter family names
            assert {"ci_autoscaler_polls", "ci_autoscaler_github_requests"} <= names
            assert names >= DESIGN_METRICS
            # every family a real scrape exports is in the generated metrics reference
            reference = METRICS_REFERENCE.read_text(encoding="utf-8")
            exported = {
                f.name + {"counter": "_total", "info": "_info"}.get(f.type, "")
                for f in text_string_to_metric_families(text)
            }
            # a counter's or histogram's creation time comes as a gauge of its own
            created = {n for n in exported if n.endswith("_created")}
            families = exported - created
            assert len(families) > 40
            assert {n.removesuffix("_created") for n in created} <= {
                n.removesuffix("_total") for n in families
            }
            assert sorted(n for n in families if f"`{n}`" not in reference) == []
            assert 'ci_autoscaler_queue_size{runner_type="linux.4xlarge"} 2.0' in text
            assert "RUNNER TYPE" in httpx.get(f"{base}/").text
            page = httpx.get(f"{base}/", headers={"Accept": "text/html"})
            assert page.headers["content-type"] == "text/html; charset=utf-8"
            assert page.headers["content-security-policy"].startswith("default-src 'none'")
            assert 'data-code="scaling_disabled"' in page.text  # scaling is off here
            assert "WHY JOBS WAIT" in httpx.get(f"{base}/?format=text").text
            assert httpx.get(f"{base}/?format=json").json()["runner_types"][0]["causes"]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=5) == 0, "SIGTERM stops the loop within an interval or so"
            assert "e2e-token" not in (proc.stderr.read() if proc.stderr else "")
    finally:
        fake.stop()


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_readyz_fails_when_github_is_down(tmp_path: Path, path: str) -> None:
    fake = seeded_github()
    config = write_config(tmp_path, fake.url, free_port())
    try:
        with running_controller(config) as (_proc, base):
            wait_for(lambda: httpx.get(f"{base}/readyz").status_code == 200, 20, "readiness")
            fake.inject_fault(r".*", 503, times=10_000)
            if path == "/healthz":
                # Liveness is not readiness: after several failed polls the process still
                # answers /healthz (a restart would not bring GitHub back).
                wait_for(lambda: _failed_polls(base) >= 3, 20, "three failed polls")
                assert httpx.get(f"{base}{path}").status_code == 200
            else:
                wait_for(lambda: httpx.get(f"{base}{path}").status_code == 503, 20, "unready")
    finally:
        fake.stop()


def test_info_logs_are_not_one_line_per_github_request(tmp_path: Path) -> None:
    fake = seeded_github()
    try:
        config = write_config(tmp_path, fake.url, free_port(), **ONE_TICK)
        result = cli("--log-level", "info", "once", "--config", str(config))
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    assert "HTTP Request:" not in result.stderr


def _failed_polls(base: str) -> float:
    """ci_autoscaler_polls_total over every result but ok, from /metrics."""
    text = httpx.get(f"{base}/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "ci_autoscaler_polls"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("result") != "ok"
    )
