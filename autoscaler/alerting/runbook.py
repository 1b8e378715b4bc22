"""Where each alert's runbook section is: an anchor derived from the alert's name.

The runbook page of the docs has one section per alert, whose anchor is :func:`anchor`
of the alert's name. An alert whose rule names no ``runbook_url`` links that section at
``alerts.runbook_base_url`` (the project's docs site by default). A renamed alert keeps
its link by renaming its section; a test checks every anchor exists in the built site.
Pure.
"""

from __future__ import annotations

import re
from dataclasses import replace

from autoscaler.alerting.builtin_rules import (
    BUDGET_RULE,
    CLOCK_SKEW_RULE,
    OBJECTIVE_RULE,
    PROVISIONING_RULE,
    STAGE_RULE,
    UNLISTED_RULE,
    UNMATCHED_RULE,
    UNREACHABLE_RULE,
)
from autoscaler.alerting.evaluation import Evaluation
from autoscaler.alerting.job_retry_alerts import DENIED_RULE, EXHAUSTED_RULE

#: Every alert the controller raises with no rule configured, in the runbook's order.
BUILTIN_RULES: tuple[str, ...] = (
    UNMATCHED_RULE,
    UNREACHABLE_RULE,
    UNLISTED_RULE,
    PROVISIONING_RULE,
    CLOCK_SKEW_RULE,
    BUDGET_RULE,
    OBJECTIVE_RULE,
    STAGE_RULE,
    EXHAUSTED_RULE,
    DENIED_RULE,
)


def anchor(name: str) -> str:
    """``GitHub unreachable`` -> ``github-unreachable``; ``CIAutoscalerDown`` ->
    ``ciautoscalerdown``: lower case, every run of other characters one dash."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def runbook_url(base: str, name: str) -> str:
    """The alert's section of the runbook page at ``base``."""
    return f"{base}#{anchor(name)}"


def with_runbook(evaluation: Evaluation, base: str) -> Evaluation:
    """The evaluation with its runbook section linked, unless its rule (or
    ``alerts.builtin``) names a runbook of its own, or ``base`` is empty."""
    if evaluation.runbook_url or not base:
        return evaluation
    return replace(evaluation, runbook_url=runbook_url(base, evaluation.rule))
