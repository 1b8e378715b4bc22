"""The Grafana dashboard and the Prometheus rules only use metrics the controller exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from autoscaler.telemetry import Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "alerts" / "dashboards" / "ci-autoscaler.json"
RULES = ROOT / "alerts" / "prometheus" / "ci-autoscaler.rules.yml"
NAME = re.compile(r"\bci_autoscaler_[a-z_]+")


def exported() -> set[str]:
    names: set[str] = set()
    for metric in Metrics(CollectorRegistry()).registry.collect():
        names.update(sample.name for sample in metric.samples)
        names.add(metric.name + ("_total" if metric.type == "counter" else ""))
        if metric.type == "histogram":  # a labelled histogram has no samples until used
            names.update(metric.name + suffix for suffix in ("_bucket", "_count", "_sum"))
    return names


def test_dashboard_exprs_use_exported_metrics_and_unique_ids() -> None:
    dash = json.loads(DASHBOARD.read_text())
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    used = {m for e in exprs for m in NAME.findall(e)}
    assert used - exported() == set()
    assert {
        "ci_autoscaler_queue_size",
        "ci_autoscaler_queue_max_age_seconds",
        "ci_autoscaler_alerts_firing",
        "ci_autoscaler_pool_desired_capacity",
        "ci_autoscaler_pool_instances",
    } <= used
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_prometheus_rules_use_exported_metrics() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    used = {m for g in groups for r in g["rules"] for m in NAME.findall(r["expr"])}
    assert used
    assert used - exported() == set()
