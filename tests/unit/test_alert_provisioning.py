"""The built-in provisioning alert: a permanent cloud error or a type out of capacity pages
at once with the code, once, and resolves when a scaling tick runs clean."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from autoscaler.alerting.builtin_rules import PROVISIONING_RULE, evaluate_provisioning
from autoscaler.config import BuiltinAlertsConfig
from autoscaler.domain import ScalingProblem
from tests.factories import oncall, paging

T0 = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
BUILTIN = BuiltinAlertsConfig(team="dev-infra", unmatched_jobs=False, github_unreachable_after=0)
DENIED = ScalingProblem("permanent", "gpu", "ci-gpu-spot", "AccessDenied", "not authorized")
OUT = ScalingProblem("out_of_capacity", "gpu", "", "", "every pool of gpu is out of capacity")


@pytest.mark.parametrize(
    ("problems", "values", "detail"),
    [
        pytest.param(
            [DENIED],
            {"permanent_errors": 1, "out_of_capacity": 0, "missing_pools": 0},
            "ci-gpu-spot: AccessDenied",
            id="permanent-names-the-code",
        ),
        pytest.param(
            [OUT],
            {"permanent_errors": 0, "out_of_capacity": 1, "missing_pools": 0},
            "gpu: out of capacity",
            id="every-pool-out",
        ),
        pytest.param(
            [ScalingProblem("launch", "gpu", "ci-gpu-od", "VcpuLimitExceeded", "limit of 0")],
            {"permanent_errors": 1, "out_of_capacity": 0, "missing_pools": 0},
            "ci-gpu-od: VcpuLimitExceeded: limit of 0",
            id="refused-launch-quotes-aws",
        ),
        pytest.param(
            [ScalingProblem("missing", "gpu", "ci-gpu-typo", "", "no such group")],
            {"permanent_errors": 0, "out_of_capacity": 0, "missing_pools": 1},
            "ci-gpu-typo: missing",
            id="missing-pool",
        ),
    ],
)
def test_provisioning_evaluation(
    problems: list[ScalingProblem], values: dict[str, int], detail: str
) -> None:
    [evaluation] = evaluate_provisioning(BUILTIN, problems, ("oncall",))
    assert evaluation.rule == PROVISIONING_RULE and evaluation.scope == "gpu"
    assert dict(evaluation.values) == {**values, "threshold_breached": 1}
    assert detail in evaluation.description


def test_no_problems_no_alert() -> None:
    assert evaluate_provisioning(BUILTIN, [], ("oncall",)) == []


def test_pages_once_then_resolves_and_holds_while_scaling_did_not_run() -> None:
    sent: list[tuple[str, str]] = []

    def capture(request: httpx.Request) -> httpx.Response:
        doc = json.loads(request.content)
        sent.append((doc["state"], doc["description"]))
        return httpx.Response(200)

    with paging(oncall(BUILTIN), capture) as (engine, deliverer):

        def step(at: datetime, problems: list[ScalingProblem] | None) -> None:
            engine.step(None, T0, at, problems=problems)
            assert deliverer.flush(10.0), "delivery did not finish"  # it runs off the tick

        tick = [T0 + timedelta(seconds=30 * i) for i in range(4)]
        step(tick[0], [DENIED])
        step(tick[1], [DENIED])  # still failing: no second page
        step(tick[2], None)  # scaling did not run: unknown, held
        assert [s for s, _ in sent] == ["FIRING"]
        assert "AccessDenied" in sent[0][1]
        step(tick[3], [])  # a clean scaling tick
        assert [s for s, _ in sent] == ["FIRING", "RESOLVED"]
