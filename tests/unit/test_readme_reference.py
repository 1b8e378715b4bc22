"""The README and config.example.yaml as a newcomer reads them: every metric the README
names exists, every metric that exists is in the README, every key the loader accepts is
in config.example.yaml, every YAML block of the README is a valid config fragment, and
every relative link and #anchor resolves.

Found in a fresh-clone review: nine metrics (the budgets, a pool's MaxSize and capacity
back-off, alert transitions, the outbox, GitHub request latency, the oldest unmatched job,
build_info) were exported but in no README table, and config.example.yaml ("every key
with a comment") lacked aws.retry, capacity_backoff_*, github.app, a rule's match and
exclude_runner_types, builtin.unmatched_jobs and the slack/pagerduty/github_issue
receivers' keys.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from autoscaler.config import json_schema, parse_config
from autoscaler.errors import ConfigError
from autoscaler.telemetry import Metrics

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
EXAMPLE = (REPO / "config.example.yaml").read_text(encoding="utf-8")
PREFIX = "ci_autoscaler_"


def _metric_families() -> dict[str, str]:
    """Family name (counters with ``_total``, Info with ``_info``) -> type."""
    families: dict[str, str] = {}
    for family in Metrics(CollectorRegistry()).registry.collect():
        suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
        families[family.name + suffix] = family.type
    return families


def _metrics_section() -> str:
    return README.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]


def _readme_metric_names() -> set[str]:
    """Every full ``ci_autoscaler_*`` name anywhere, plus every short name in the first
    column of the Metrics table (the table leaves the prefix out)."""
    names = {n for n in re.findall(r"\bci_autoscaler_[a-z0-9_]*[a-z0-9]", README)}
    for row in _metrics_section().splitlines():
        if row.startswith("| `"):
            first_column = row.split("|")[1]
            names |= {
                PREFIX + n for n in re.findall(r"`([a-z][a-z0-9_]*)(?:\{[^}`]*\})?`", first_column)
            }
    return names


def test_every_metric_the_readme_names_is_defined_in_telemetry() -> None:
    families = _metric_families()
    named = _readme_metric_names()
    assert len(named) > 40, "the README's metric names were not found: the parser is wrong"
    missing = sorted(n for n in named if n not in families)
    assert missing == [], f"named in README.md, not defined in autoscaler/telemetry.py: {missing}"


def test_every_defined_metric_is_in_the_readme_metrics_table() -> None:
    documented = {
        PREFIX + n
        for row in _metrics_section().splitlines()
        if row.startswith("| `")
        for n in re.findall(r"`([a-z][a-z0-9_]*)(?:\{[^}`]*\})?`", row.split("|")[1])
    }
    missing = sorted(set(_metric_families()) - documented)
    assert missing == [], f"defined in telemetry.py, not in README's Metrics table: {missing}"


def _accepted_keys() -> set[str]:
    """Every key name a config file may write: the properties of the JSON Schema the
    loader checks files against."""
    schema = json_schema()
    sections = [schema, *schema["$defs"].values()]
    return {key for section in sections for key in section.get("properties", {})}


def test_every_config_key_is_in_config_example_yaml() -> None:
    keys = _accepted_keys()
    assert {"poll_interval", "runner_types", "capacity_backoff_max", "lease_duration"} <= keys
    missing = sorted(
        k for k in keys if not re.search(rf"(^|[\s{{,#]){re.escape(k)}:", EXAMPLE, re.MULTILINE)
    )
    assert missing == [], f"accepted by the loader, absent from config.example.yaml: {missing}"


BASE: dict[str, Any] = {
    "github": {"owner": "my-org", "token": "x"},
    "runner_types": {"linux.4xlarge": {"labels": ["self-hosted", "linux.4xlarge"]}},
}
ENV = {
    "GITHUB_TOKEN": "x",
    "PD_KEY": "x",
    "GITHUB_WEBHOOK_SECRET": "x",
    "INTERRUPTION_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/interruptions",
}


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def _config_blocks() -> list[Any]:
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", README, re.DOTALL)]
    # alertmanager.yml (route) and prometheus.yml (global) blocks are theirs, not ours
    return [b for b in blocks if isinstance(b, dict) and not {"route", "global"} & set(b)]


@pytest.mark.parametrize("block", _config_blocks(), ids=lambda b: "+".join(sorted(b))[:60])
def test_every_readme_yaml_block_is_a_valid_config_fragment(block: dict[str, Any]) -> None:
    doc = _merge(copy.deepcopy(BASE), block)
    try:
        parse_config(doc, ENV, base_dir=REPO)
    except ConfigError as exc:
        pytest.fail(f"a README YAML block does not load: {exc.problems}")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = heading.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _headings(markdown: str) -> set[str]:
    prose = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", prose, re.MULTILINE)}


@pytest.mark.parametrize("doc", ["README.md", "terraform/README.md"])
def test_every_relative_link_and_anchor_resolves(doc: str) -> None:
    path = REPO / doc
    prose = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file) if file else path
        dead_anchor = (
            linked.exists()
            and bool(anchor)
            and linked.suffix == ".md"
            and anchor not in _headings(linked.read_text(encoding="utf-8"))
        )
        if not linked.exists() or dead_anchor:
            broken.append(target)
    assert broken == [], f"{doc}: dead links {broken}"
