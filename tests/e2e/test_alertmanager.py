"""The documented Alertmanager setup (docs/alerts.md) against a real Alertmanager (Debian).

The story: configured as the docs showed, every notification of the
`alertmanager` receiver was refused with HTTP 400 ("cannot unmarshal object into Go value
of type models.PostableAlerts"): it posted the webhook payload Alertmanager sends to its
own receivers, not the postable alerts its API takes, and the delivery tests passed
against a capture server that accepts anything. On-call who route through Alertmanager
got nothing. Here a real `ci-autoscaler run` and a real HA pair of Alertmanagers, both
configured from the docs' own blocks, must show the queue alert active during the
incident, keep it active across ticks for longer than Alertmanager's resolve_timeout,
and resolve it when the queue drains; and the shipped Prometheus rules, evaluated by a
real Prometheus with the real Alertmanager as its target, must reach on-call too.
"""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from autoscaler.alerting import render
from autoscaler.alerting.evaluation import Evaluation
from autoscaler.alerting.lifecycle import Notification
from autoscaler.alerting.runbook import runbook_url
from autoscaler.config.alerts import DEFAULT_RUNBOOK_BASE_URL
from tests.conftest import free_port, require_tool
from tests.e2e.alertmanager_support import (
    ROOT,
    Alertmanager,
    alertmanager,
    docs_yaml,
    fast,
    inbox,
)
from tests.e2e.harness import cli, running_controller, seeded_github, wait_for, write_config

GPU_TYPE = "linux.g5.4xlarge.nvidia.gpu"
FLEET_RULE = "JobsQueueingTooLong"  # "Jobs queueing too long", shipped in the package
GPU_RULE = "GPUJobsQueueing"  # the alertname of config.example.yaml's "GPU jobs queueing"
PROMETHEUS_RULES = ROOT / "alerts" / "prometheus" / "ci-autoscaler.rules.yml"


def controller_alerts(*urls: str) -> dict[str, Any]:
    """The docs' controller block, pointed at the test's Alertmanagers: the first by
    base URL (as the docs write it), the second by the full API path; plus a
    per-runner-type rule like config.example.yaml's."""
    alerts: dict[str, Any] = docs_yaml("docs: controller alertmanager receiver")["alerts"]
    receiver = alerts["receivers"]["oncall"]
    assert receiver["type"] == "alertmanager"
    assert receiver["url"] == "http://alertmanager:9093"
    del receiver["url"]
    receiver["urls"] = [urls[0], *(f"{u}/api/v2/alerts" for u in urls[1:])]
    alerts["alertmanager_resend"] = "1s"
    alerts["rules"] = [
        {
            "name": "GPU jobs queueing",
            "team": "pytorch-dev-infra",
            "priority": "P2",
            "description": "GPU jobs wait too long for a runner",
            "runbook_url": "https://example.com/runbooks/ci-queue",
            "runner_types": ["*gpu*"],
            "per_runner_type": True,
            "max_queue_time": "30m",
            "receivers": ["oncall"],
        }
    ]
    return alerts


def assert_webhook_shape_matches(real: dict[str, Any]) -> None:
    """``alertmanager_webhook`` sends what Alertmanager sends its webhook receivers (for
    tools that consume those): the same keys as a real Alertmanager's notification."""
    ev = Evaluation("r", "fleet", "t", "P2", "d", ("x",), {"threshold_breached": 1})
    ours = render.alertmanager_payload(
        Notification("FIRING", ev, datetime.now(UTC), datetime.now(UTC)), "x"
    )
    assert set(ours) == set(real)
    assert set(ours["alerts"][0]) == set(real["alerts"][0])
    assert ours["version"] == real["version"]


def by_rule(am: Alertmanager) -> dict[str, dict[str, Any]]:
    return {a["labels"]["alertname"]: a for a in am.alerts()}


def test_readme_alertmanager_setup_holds_the_alert_through_the_incident(tmp_path: Path) -> None:
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=90)
    try:
        with inbox() as box:
            am_config = fast(docs_yaml("docs: alertmanager.yml"), box.url)
            with (
                alertmanager(tmp_path, am_config, "am0") as am0,
                alertmanager(tmp_path, am_config, "am1") as am1,
            ):
                alerts = controller_alerts(am0.url, am1.url)
                config = write_config(tmp_path, fake.url, free_port(), alerts=alerts)
                with running_controller(config):
                    pair = (am0, am1)
                    wanted = {FLEET_RULE, GPU_RULE}
                    wait_for(
                        lambda: all(wanted <= set(by_rule(am)) for am in pair),
                        20,
                        "both alerts active in both Alertmanagers",
                    )
                    for am in pair:
                        gpu = by_rule(am)[GPU_RULE]
                        assert gpu["status"]["state"] == "active"
                        assert gpu["labels"] == {
                            "alertname": GPU_RULE,
                            "team": "pytorch-dev-infra",
                            "priority": "P2",
                            "severity": "error",
                            "runner_type": GPU_TYPE,
                        }
                        notes = gpu["annotations"]
                        assert notes["summary"] == f"[P2] GPU jobs queueing ({GPU_TYPE})"
                        assert notes["description"] == "GPU jobs wait too long for a runner"
                        assert notes["reason"].startswith("max_queue_size=3, max_queue_time_mins=")
                        assert notes["reason"].endswith("threshold_breached=1")
                        assert notes["runbook_url"] == "https://example.com/runbooks/ci-queue"
                        fleet = by_rule(am)[FLEET_RULE]
                        assert fleet["annotations"]["runbook_url"] == runbook_url(
                            DEFAULT_RUNBOOK_BASE_URL, "Jobs queueing too long"
                        )  # the shipped rule links its section of the docs' runbook
                        assert "runner_type" not in fleet["labels"]
                        assert fleet["labels"]["team"] == "pytorch-dev-infra"
                        assert fleet["generatorURL"] == "https://example.com/d/ci-autoscaler"

                    # Several ticks, well past resolve_timeout (1s) and past any single
                    # post's endsAt (4 x 1s): still active in both, re-posted meanwhile.
                    first_ends = by_rule(am0)[GPU_RULE]["endsAt"]
                    held_until = time.monotonic() + 7
                    while time.monotonic() < held_until:
                        for am in pair:
                            assert wanted <= set(by_rule(am)), "an alert expired while firing"
                        time.sleep(0.25)
                    assert by_rule(am0)[GPU_RULE]["endsAt"] > first_ends
                    # on-call was told once per group, not once per re-post
                    assert box.alerts(GPU_RULE, "firing")
                    assert not box.alerts(GPU_RULE, "resolved")
                    # the alertmanager_webhook receiver mimics exactly this body
                    assert_webhook_shape_matches(box.bodies[0])

                    for job in fake.queued_jobs():  # the incident ends: the queue drains
                        fake.complete_job(job.id)
                    wait_for(
                        lambda: not any({FLEET_RULE, GPU_RULE} & set(by_rule(am)) for am in pair),
                        10,
                        "both alerts resolved in both Alertmanagers",
                    )
                    wait_for(
                        lambda: (
                            box.alerts(GPU_RULE, "resolved") and box.alerts(FLEET_RULE, "resolved")
                        ),
                        10,
                        "Alertmanager's resolved notifications",
                    )
                    resolved = box.alerts(GPU_RULE, "resolved")[-1]
                    assert resolved["labels"]["runner_type"] == GPU_TYPE
                    assert resolved["annotations"]["reason"].endswith("threshold_breached=0")
    finally:
        fake.stop()


def test_shipped_prometheus_rules_reach_on_call_through_alertmanager(tmp_path: Path) -> None:
    prometheus = require_tool("prometheus")
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=90)
    try:
        with inbox() as box:
            am_config = fast(docs_yaml("docs: alertmanager.yml"), box.url)
            with alertmanager(tmp_path, am_config) as am:
                controller_port, prom_port = free_port(), free_port()
                config = write_config(tmp_path, fake.url, controller_port)
                (tmp_path / "prometheus.yml").write_text(
                    yaml.safe_dump(
                        {
                            "global": {
                                "scrape_interval": "1s",
                                "evaluation_interval": "1s",
                                # team and links are configuration, not rule literals
                                "external_labels": {
                                    "team": "pytorch-dev-infra",
                                    "runbook_base_url": DEFAULT_RUNBOOK_BASE_URL,
                                    "dashboard_url": "https://example.com/d/ci-autoscaler",
                                },
                            },
                            "rule_files": [str(PROMETHEUS_RULES)],
                            "alerting": {
                                "alertmanagers": [
                                    {
                                        "api_version": "v2",
                                        "static_configs": [
                                            {"targets": [am.url.removeprefix("http://")]}
                                        ],
                                    }
                                ]
                            },
                            "scrape_configs": [
                                {
                                    "job_name": "ci-autoscaler",
                                    "static_configs": [
                                        {"targets": [f"127.0.0.1:{controller_port}"]}
                                    ],
                                }
                            ],
                        }
                    )
                )
                with (
                    (tmp_path / "prometheus.log").open("w") as log,
                    running_controller(config),
                ):
                    prom = subprocess.Popen(
                        [
                            prometheus,
                            f"--config.file={tmp_path / 'prometheus.yml'}",
                            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                            f"--web.listen-address=127.0.0.1:{prom_port}",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=log,
                    )
                    try:
                        wait_for(
                            lambda: "JobsQueueingTooLong" in by_rule(am),
                            30,
                            "JobsQueueingTooLong in Alertmanager",
                        )
                        alert = by_rule(am)["JobsQueueingTooLong"]
                        assert alert["labels"]["team"] == "pytorch-dev-infra"
                        assert alert["labels"]["priority"] == "P2"
                        assert alert["labels"]["severity"] == "error"
                        assert alert["annotations"]["summary"] == "[P2] Jobs queueing too long"
                        notes = alert["annotations"]
                        assert notes["runbook_url"] == runbook_url(
                            DEFAULT_RUNBOOK_BASE_URL, "JobsQueueingTooLong"
                        )  # its section of the docs' runbook, from the base Prometheus adds
                        assert notes["dashboard_url"] == "https://example.com/d/ci-autoscaler"
                        wait_for(
                            lambda: box.alerts("JobsQueueingTooLong", "firing"),
                            10,
                            "Alertmanager's notification to on-call",
                        )
                    finally:
                        prom.terminate()
                        prom.wait(timeout=10)
    finally:
        fake.stop()


def test_alerts_test_waits_out_group_wait_and_reads_the_alert_back(tmp_path: Path) -> None:
    """Story: ``alerts test`` posted FIRING and RESOLVED back to back: Alertmanager took
    both, but the alert resolved before its route's group_wait ended, so nobody was ever
    notified and the test said "sent". Now it waits the longest group_wait (3s here, in a
    child route), finds the alert in /api/v2/alerts with the receivers it routes to, and
    only then resolves it: on-call's webhook got the FIRING notification."""
    with inbox() as box:
        am_config = {
            "route": {
                "receiver": "oncall-hook",
                "group_by": ["alertname"],
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
                "routes": [
                    {
                        "matchers": ['priority="P4"'],
                        "receiver": "oncall-hook",
                        "group_wait": "3s",
                    }
                ],
            },
            "receivers": [{"name": "oncall-hook", "webhook_configs": [{"url": box.url}]}],
        }
        with alertmanager(tmp_path, am_config) as am:
            alerts = {"receivers": {"oncall": {"type": "alertmanager", "url": am.url}}}
            config = write_config(tmp_path, "http://127.0.0.1:9", free_port(), alerts=alerts)
            started = time.monotonic()
            done = cli("alerts", "test", "oncall", "--config", str(config), timeout=120)
            took = time.monotonic() - started
            assert done.returncode == 0, done.stdout + done.stderr
            lines = done.stdout.splitlines()
            assert "oncall: FIRING: sent" in lines
            host = am.url.removeprefix("http://")
            assert (
                f"oncall: received 1: {host}: received after group_wait 3s, active, "
                "routed to oncall-hook"
            ) in lines
            assert "oncall: RESOLVED: sent" in lines
            assert took >= 3
            wait_for(
                lambda: box.alerts("CiAutoscalerTestAlert", "firing"),
                10,
                "on-call notified of the test alert",
            )
