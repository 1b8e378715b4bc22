"""A real Prometheus scrapes a running `ci-autoscaler run` and evaluates alerts/prometheus.

The story: GPU jobs have waited 90 minutes on the fake GitHub; the controller exports
the queue; Prometheus (Debian's package) scrapes it every second and its copy of the
shipped rules reports JobsQueueingTooLong as firing in /api/v1/alerts.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import yaml

from tests.conftest import free_port, require_tool
from tests.e2e.harness import running_controller, seeded_github, wait_for, write_config

GPU_TYPE = "linux.g5.4xlarge.nvidia.gpu"
RULES = Path(__file__).resolve().parents[2] / "alerts" / "prometheus" / "ci-autoscaler.rules.yml"


def test_real_prometheus_fires_the_mirrored_queue_alert(tmp_path: Path) -> None:
    prometheus = require_tool("prometheus")
    fake = seeded_github(gpu_jobs=3, gpu_age_minutes=90)
    controller_port, prom_port = free_port(), free_port()
    config = write_config(tmp_path, fake.url, controller_port)
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [
                    {
                        "job_name": "ci-autoscaler",
                        "static_configs": [{"targets": [f"127.0.0.1:{controller_port}"]}],
                    }
                ],
            }
        )
    )
    prom = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    api = f"http://127.0.0.1:{prom_port}/api/v1"
    try:
        with running_controller(config):

            def firing() -> set[str]:
                try:
                    alerts = httpx.get(f"{api}/alerts", timeout=2).json()["data"]["alerts"]
                except (httpx.HTTPError, ValueError, KeyError):
                    return set()
                return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

            wait_for(lambda: "JobsQueueingTooLong" in firing(), 60, "JobsQueueingTooLong")
            up = httpx.get(f"{api}/query", params={"query": 'up{job="ci-autoscaler"}'}).json()
            assert up["data"]["result"][0]["value"][1] == "1"
            age = httpx.get(
                f"{api}/query",
                params={
                    "query": f'ci_autoscaler_queue_max_age_seconds{{runner_type="{GPU_TYPE}"}}'
                },
            ).json()
            assert float(age["data"]["result"][0]["value"][1]) > 3600
            assert "CIAutoscalerDown" not in firing()
    finally:
        prom.terminate()
        prom.wait(timeout=10)
        fake.stop()
