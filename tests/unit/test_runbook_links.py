"""Every alert links its runbook section: the built-in alerts and the shipped rule through
``alerts.runbook_base_url`` (the project's docs site by default), the shipped Prometheus
rules in their ``runbook_url`` annotation (from the ``runbook_base_url`` external label).
Anchors come from the alert's name.

The story: the shipped Prometheus rules linked ``https://example.com/runbooks/ci-queue``,
and only 3 of 14 alerts had a runbook link at all; the built-in alerts had none unless
``alerts.builtin.runbook_url`` was set, and then all of them had the same one.
tests/e2e/test_docs_site.py checks that each anchor exists in the built site.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from autoscaler.alerting import builtin_rules, job_retry_alerts
from autoscaler.alerting.evaluation import Evaluation
from autoscaler.alerting.runbook import BUILTIN_RULES, anchor, runbook_url, with_runbook
from autoscaler.config import AlertsConfig, BuiltinAlertsConfig, QueueObjective
from autoscaler.config.alerts import DEFAULT_RUNBOOK_BASE_URL, shipped_rule_bodies
from autoscaler.domain import ClockSkew, PollBudget, QueueSnapshot, ScalingProblem
from autoscaler.job_retry.decide import RetryReport
from autoscaler.job_retry.ledger import Exhausted
from autoscaler.observe.starts import ObjectiveStatus
from autoscaler.observe.waits import StageRegression
from tests.factories import alert_engine, load_config

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
BASE = DEFAULT_RUNBOOK_BASE_URL
#: The shipped Prometheus rules name no URL: Prometheus's external labels give the base.
PROMETHEUS_BASE = "{{ $externalLabels.runbook_base_url }}"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("GitHub unreachable", "github-unreachable", id="words"),
        pytest.param("Queue-time objective burning", "queue-time-objective-burning", id="dash"),
        pytest.param("Job re-runs not permitted", "job-re-runs-not-permitted", id="inner-dash"),
        pytest.param("CIAutoscalerDown", "ciautoscalerdown", id="camel-case"),
        pytest.param("  Odd: name (x)  ", "odd-name-x", id="punctuation-trimmed"),
    ],
)
def test_the_anchor_is_the_name_in_lower_case_dashed(name: str, expected: str) -> None:
    assert anchor(name) == expected


def _evaluation(runbook: str = "") -> Evaluation:
    return Evaluation("GitHub unreachable", "fleet", "t", "P2", "d", (), {}, runbook_url=runbook)


@pytest.mark.parametrize(
    ("own", "base", "expected"),
    [
        pytest.param("", BASE, f"{BASE}#github-unreachable", id="default-docs"),
        pytest.param(
            "",
            "https://wiki.example/rb",
            "https://wiki.example/rb#github-unreachable",
            id="own-base",
        ),
        pytest.param("https://rb.example/q", BASE, "https://rb.example/q", id="rule-own-link-wins"),
        pytest.param("", "", "", id="base-empty-no-link"),
    ],
)
def test_with_runbook(own: str, base: str, expected: str) -> None:
    assert with_runbook(_evaluation(own), base).runbook_url == expected


def test_the_default_base_is_the_docs_sites_runbook_page() -> None:
    site = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["site_url"]
    assert f"{site}runbook/" == BASE
    assert AlertsConfig().runbook_base_url == BASE


def test_the_base_is_configurable() -> None:
    ours = load_config(alerts={"runbook_base_url": "https://wiki.example/ci-runbook"})
    assert ours.alerts.runbook_base_url == "https://wiki.example/ci-runbook"
    assert load_config().alerts.runbook_base_url == BASE


def test_every_builtin_alert_links_its_own_section() -> None:
    """One tick in which every built-in alert is evaluated (most of them firing)."""
    engine = alert_engine(AlertsConfig(builtin=BuiltinAlertsConfig()))
    snapshot = QueueSnapshot(T0, {}, unmatched_jobs=2, ghost_jobs=0, unmatched_ages_seconds=(60.0,))
    objective = ObjectiveStatus(
        "gpu", QueueObjective(queue_time=300.0, objective=0.95), {3600.0: (1, 10)}
    )
    exhausted = Exhausted("o/r", 1, 2, "build", "pool-i-1", 2, "spot_interruption", "w", T0)
    evaluations, _ = engine.evaluate(
        snapshot,
        None,
        T0,
        [ScalingProblem("permanent", "gpu", "gpu-spot", "AccessDenied", "no")],
        clock_skew=ClockSkew(github=120.0),
        budget=PollBudget(30.0, 90.0, 900.0, 4000.0, 36000.0, True),
        objectives={"gpu": objective},
        retries=RetryReport(exhausted=(exhausted,), denied={"o/r": "forbidden"}),
        unlisted=["o/r"],
        stages=[StageRegression("gpu", "boot", 95.0, 240.0, 40, 30, regressed=True)],
    )
    shipped = {body["name"] for body in shipped_rule_bodies()}  # on by default
    assert {e.rule for e in evaluations} == set(BUILTIN_RULES) | shipped
    for e in evaluations:
        assert e.runbook_url == f"{BASE}#{anchor(e.rule)}", e.rule


@pytest.mark.parametrize("module", [builtin_rules, job_retry_alerts], ids=lambda m: m.__name__)
def test_every_builtin_alert_name_is_in_the_runbooks_list(module: ModuleType) -> None:
    """The story: "GitHub repositories not listed" was added as a built-in alert, and the
    list of built-in alerts the runbook, the alerts reference and the anchor check walk
    did not name it, so its link pointed at a section that did not exist."""
    names = {v for k, v in vars(module).items() if k.endswith("_RULE") and isinstance(v, str)}
    assert names and names <= set(BUILTIN_RULES)


def test_alerts_builtin_runbook_url_still_overrides_every_builtin() -> None:
    config = AlertsConfig(builtin=BuiltinAlertsConfig(runbook_url="https://rb.example/ours"))
    evaluations, _ = alert_engine(config).evaluate(None, None, T0)
    assert evaluations and {e.runbook_url for e in evaluations} == {"https://rb.example/ours"}


def test_the_shipped_rule_links_its_section() -> None:
    config = load_config(
        alerts={"receivers": {"oncall": {"type": "webhook", "url": "https://hooks.example/x"}}}
    ).alerts
    shipped = {body["name"] for body in shipped_rule_bodies()}
    assert shipped and shipped <= {r.name for r in config.rules}
    snapshot = QueueSnapshot(T0, {}, unmatched_jobs=0, ghost_jobs=0)
    evaluations, _ = alert_engine(config).evaluate(snapshot, T0, T0)
    assert {e.rule for e in evaluations} >= shipped
    for e in evaluations:
        if e.rule in shipped:
            assert e.runbook_url == f"{BASE}#{anchor(e.rule)}"


def _prometheus_alerts() -> list[dict[str, object]]:
    doc = yaml.safe_load(
        (REPO / "alerts" / "prometheus" / "ci-autoscaler.rules.yml").read_text(encoding="utf-8")
    )
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


@pytest.mark.parametrize("rule", _prometheus_alerts(), ids=lambda r: str(r["alert"]))
def test_every_prometheus_alert_links_its_section(rule: dict[str, object]) -> None:
    annotations = rule["annotations"]
    assert isinstance(annotations, dict)
    assert annotations.get("runbook_url") == runbook_url(PROMETHEUS_BASE, str(rule["alert"]))


def _runbook_sections() -> list[tuple[str, str]]:
    text = (REPO / "docs" / "runbook.md").read_text(encoding="utf-8")
    parts = re.split(r"^### ", text, flags=re.MULTILINE)[1:]
    return [(p.splitlines()[0], p) for p in parts]


@pytest.mark.parametrize(("title", "body"), _runbook_sections(), ids=lambda v: v[:40])
def test_every_runbook_section_says_what_it_means_and_what_to_do(title: str, body: str) -> None:
    """On-call reads one section at 3 a.m.: it must say what the alert or cause means and
    what to do, not only what to look at."""
    assert "**Means:**" in body and "**Do:**" in body, title
