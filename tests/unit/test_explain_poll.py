"""``explain`` says how often GitHub is read: polling alone, the cadence and its staleness
limit (a quiet repository is read less often, so a person asking why a job waits must
see how stale the picture may be); as the webhook reconcile, its intervals."""

from __future__ import annotations

import pytest

from autoscaler.app.explain import explain_json, poll_line
from autoscaler.domain import PollBudget

ALONE = PollBudget(
    poll_interval=30.0,
    busy_interval=30.0,
    quiet_interval=60.0,
    budget_per_hour=4000.0,
    needed_per_hour=3000.0,
    too_small=False,
    staleness_limit=300.0,
    live_repos=12,
    quiet_repos=988,
)
RECONCILE = PollBudget(30.0, 30.0, 120.0, 4000.0, 3000.0, False)


@pytest.mark.parametrize(
    ("budget", "line"),
    [
        pytest.param(
            ALONE,
            "GitHub poll: 12 live repositories every 30s, 988 quiet ones by their newest runs "
            "every 60s; everything re-read at least every 300s (staleness limit)",
            id="polling-alone",
        ),
        pytest.param(
            RECONCILE,
            "GitHub reconcile: busy units every 30s, the others every 120s",
            id="webhook-reconcile",
        ),
    ],
)
def test_explain_says_how_often_github_is_read(budget: PollBudget, line: str) -> None:
    assert poll_line(budget) == line


def test_explain_json_carries_the_staleness_limit_and_keeps_its_keys() -> None:
    out = explain_json([], budget=ALONE)
    assert out["runner_types"] == []
    assert out["github_poll"]["staleness_limit_seconds"] == 300.0
    assert (out["github_poll"]["live_repos"], out["github_poll"]["quiet_repos"]) == (12, 988)
    assert explain_json([]) == {"runner_types": []}  # no poll planned: as before
