"""The alerts reference: the built-in alerts, the shipped rule files and Prometheus rules.

Each entry links its runbook section by :func:`autoscaler.alerting.runbook.anchor`, so
``mkdocs build --strict`` fails when an alert has no section in the runbook.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autoscaler.alerting.runbook import BUILTIN_RULES, anchor
from docgen.markdown import GENERATED, cell, code, table

REPO = Path(__file__).resolve().parents[1]
RULE_FILES = "alerts/rules/*.yaml"
PROMETHEUS_RULES = "alerts/prometheus/ci-autoscaler.rules.yml"


def _runbook(name: str) -> str:
    return f"[runbook](../runbook.md#{anchor(name)})"


def rule_file_rules() -> list[tuple[str, dict[str, Any]]]:
    """(file, rule) for every rule of the shipped rule files."""
    out = []
    for path in sorted(REPO.glob(RULE_FILES)):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        out += [(path.relative_to(REPO).as_posix(), r) for r in doc.get("rules", [])]
    return out


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
    files = [
        [
            cell(r["name"]),
            code(file),
            cell(r.get("priority", "")),
            cell(_fires_when(r)),
            _runbook(r["name"]),
        ]
        for file, r in rule_file_rules()
    ]
    parts = [
        "# Alerts reference",
        "",
        GENERATED.format(source="the built-in rules, alerts/rules and alerts/prometheus"),
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
        "### Shipped rule files",
        "",
        f"Loaded with `alerts.rule_files: [{RULE_FILES}]`.",
        "",
        table(["Alert", "File", "Priority", "Fires when", "Runbook"], files),
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
