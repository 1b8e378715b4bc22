"""The alerts reference: the built-in alerts, the shipped rules and Prometheus rules.

Each entry links its runbook section by :func:`autoscaler.alerting.runbook.anchor`, so
``mkdocs build --strict`` fails when an alert has no section in the runbook.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autoscaler.alerting.runbook import BUILTIN_RULES, anchor
from autoscaler.config.alerts import shipped_rule_bodies
from docgen.markdown import GENERATED, cell, code, table

REPO = Path(__file__).resolve().parents[1]
SHIPPED_RULES = "autoscaler/config/shipped_rules.yaml"
PROMETHEUS_RULES = "alerts/prometheus/ci-autoscaler.rules.yml"


def _runbook(name: str) -> str:
    return f"[runbook](../runbook.md#{anchor(name)})"


def shipped_rules() -> list[dict[str, Any]]:
    """Every queue rule shipped in the package, as written there."""
    return list(shipped_rule_bodies())


def prometheus_alerts() -> list[tuple[str, dict[str, Any]]]:
    """(group, rule) for every alerting rule of the shipped Prometheus rules."""
    doc = yaml.safe_load((REPO / PROMETHEUS_RULES).read_text(encoding="utf-8"))
    return [(g["name"], r) for g in doc["groups"] for r in g["rules"] if "alert" in r]


def _fires_when(rule: dict[str, Any]) -> str:
    checks = []
    if "max_queue_size" in rule:
        checks.append(f"queue size > {rule['max_queue_size']}")
    if "max_queue_time" in rule:
        checks.append(f"queue time > {rule['max_queue_time']}")
    joined = (" and " if rule.get("match") == "all" else " or ").join(checks)
    return joined + (f", for {rule['for']}" if rule.get("for") not in (None, "0s") else "")


def render() -> str:
    builtin = [[cell(name), "built in, `alerts.builtin`", _runbook(name)] for name in BUILTIN_RULES]
    shipped = [
        [cell(r["name"]), code(SHIPPED_RULES), cell(_fires_when(r)), _runbook(r["name"])]
        for r in shipped_rules()
    ]
    parts = [
        "# Alerts reference",
        "",
        GENERATED.format(source="the built-in rules, the shipped rules and alerts/prometheus"),
        "",
        "Every alert the project ships. The [runbook](../runbook.md) has a section for each:"
        " what it means, what to check, what to do.",
        "",
        "## The controller's alerts",
        "",
        "The controller evaluates these itself and sends them to its receivers (see"
        " [Alerts and receivers](../alerts.md)).",
        "",
        "### Built in",
        "",
        "Team, priority and receivers come from `alerts.builtin`.",
        "",
        table(["Alert", "Source", "Runbook"], builtin),
        "",
        "### Shipped rules",
        "",
        "Inside the package, on by default (`alerts.builtin.shipped_rules`). Team, priority,"
        " receivers and links come from `alerts.builtin`; a rule of yours with the same name"
        " replaces one.",
        "",
        table(["Alert", "File", "Fires when", "Runbook"], shipped),
        "",
        "## Prometheus rules",
        "",
        f"From `{PROMETHEUS_RULES}`, for Prometheus and Alertmanager.",
    ]
    for group, r in prometheus_alerts():
        labels = r.get("labels", {})
        summary = r.get("annotations", {}).get("summary", "")
        parts += [
            "",
            f"### {r['alert']}",
            "",
            f"Group `{group}`, priority {labels.get('priority', '?')}, for"
            f" {r.get('for', '0m')}. See its {_runbook(r['alert'])}.",
            "",
            f"Summary: {cell(summary)}",
            "",
            "```promql",
            r["expr"].strip(),
            "```",
        ]
    return "\n".join(parts) + "\n"
