"""Where each alert's runbook section is: an anchor derived from the alert's name.

The runbook page of the docs has one section per alert, whose anchor is
:func:`anchor` of the alert's name. So a renamed alert keeps a link by renaming its
section, and a test checks that every alert's anchor exists in the built site. Pure.
"""

from __future__ import annotations

import re

from autoscaler.alerting.builtin_rules import (
    BUDGET_RULE,
    CLOCK_SKEW_RULE,
    OBJECTIVE_RULE,
    PROVISIONING_RULE,
    UNMATCHED_RULE,
    UNREACHABLE_RULE,
)
from autoscaler.alerting.job_retry_alerts import DENIED_RULE, EXHAUSTED_RULE

#: Every alert the controller raises with no rule configured, in the runbook's order.
BUILTIN_RULES: tuple[str, ...] = (
    UNMATCHED_RULE,
    UNREACHABLE_RULE,
    PROVISIONING_RULE,
    CLOCK_SKEW_RULE,
    BUDGET_RULE,
    OBJECTIVE_RULE,
    EXHAUSTED_RULE,
    DENIED_RULE,
)


def anchor(name: str) -> str:
    """``GitHub unreachable`` -> ``github-unreachable``; ``CIAutoscalerDown`` ->
    ``ciautoscalerdown``: lower case, every run of other characters one dash."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
