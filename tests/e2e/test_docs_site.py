"""The docs site as it is built (mkdocs-material, strict): every alert's runbook anchor and
every cause code's section exist in the built runbook page, so each ``runbook_url`` an
alert carries lands on its own section, not on the top of the page.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from mkdocs.commands.build import build
from mkdocs.config import load_config

from autoscaler.alerting.runbook import BUILTIN_RULES, anchor
from autoscaler.config.alerts import shipped_rule_bodies
from autoscaler.scale.causes import CODES

REPO = Path(__file__).resolve().parents[2]


def _shipped_alert_names() -> list[str]:
    names = list(BUILTIN_RULES)
    names += [body["name"] for body in shipped_rule_bodies()]
    rules = yaml.safe_load(
        (REPO / "alerts" / "prometheus" / "ci-autoscaler.rules.yml").read_text(encoding="utf-8")
    )
    names += [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    return names


def test_every_alert_and_cause_has_its_section_in_the_built_runbook(tmp_path: Path) -> None:
    site = tmp_path / "site"
    build(load_config(str(REPO / "mkdocs.yml"), site_dir=str(site), strict=True))
    page = (site / "runbook" / "index.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    names = _shipped_alert_names()
    assert len(names) >= 23, names  # 9 built in, 1 shipped rule, 17 Prometheus
    missing = sorted(n for n in names if anchor(n) not in ids)
    assert missing == [], f"alerts without a section in the built runbook: {missing}"
    missing_causes = sorted(c for c in CODES if c not in ids)
    assert missing_causes == [], f"cause codes without a section: {missing_causes}"
