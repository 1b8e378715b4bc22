"""Job retry reads how EC2 says an instance ended when no interruption event arrived.

Over hand-written fakes, the port :class:`~autoscaler.job_retry.stage.InstanceFates` among
them (the adapter's translation of ``StateReason`` is tested against moto and a botocore
Stubber in ``tests/adapters/test_aws_instance_ends.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.domain import CompletedJob
from autoscaler.errors import AutoscalerError, TransientError
from autoscaler.job_retry.classify import EVENT_GRACE
from autoscaler.job_retry.decide import RERUN, SKIP
from autoscaler.job_retry.model import InstanceEnd
from autoscaler.job_retry.stage import SETTLE, RetryStage
from autoscaler.telemetry import Metrics
from tests.unit.test_job_retry_stage import (
    INSTANCE,
    NOW,
    Rerunner,
    Source,
    config,
    count,
    first,
    job,
)

SPOT_END = InstanceEnd(INSTANCE, spot=True, code="Server.SpotInstanceTermination")
USER_END = InstanceEnd(INSTANCE, spot=False, code="Client.UserInitiatedShutdown")


class Fates:
    """The EC2 port: answers with ``ends`` (or raises ``errors`` first), records asks."""

    def __init__(self, *ends: InstanceEnd, errors: Sequence[AutoscalerError] = ()) -> None:
        self.ends = {e.instance_id: e for e in ends}
        self.errors = list(errors)
        self.asked: list[list[str]] = []

    def instance_ends(self, instance_ids: Sequence[str]) -> Mapping[str, InstanceEnd]:
        self.asked.append(list(instance_ids))
        if self.errors:
            raise self.errors.pop(0)
        return {i: self.ends[i] for i in instance_ids if i in self.ends}


def settled_failure(minutes_ago: float = 3.0) -> CompletedJob:
    """A failure with no evidence of its own (no annotation, a failed step), on INSTANCE."""
    return job(1, annotations=(), completed_at=NOW - timedelta(minutes=minutes_ago))


def stage_with(
    fates: Fates | None, *batches: Sequence[CompletedJob]
) -> tuple[RetryStage, Metrics, Rerunner]:
    metrics, rerunner = Metrics(CollectorRegistry()), Rerunner()
    return RetryStage(config(), Source(*batches), rerunner, metrics, fates=fates), metrics, rerunner


@pytest.mark.parametrize(
    ("fates", "reason", "result"),
    [
        pytest.param(Fates(SPOT_END), "spot_interruption", RERUN, id="ec2-says-spot-rerun"),
        pytest.param(Fates(USER_END), "user", SKIP, id="ended-for-another-reason-user"),
        pytest.param(Fates(), "user", SKIP, id="still-running-user"),
        pytest.param(None, "user", SKIP, id="no-cloud-port-user"),
    ],
)
def test_an_instance_spot_ended_without_any_event_is_a_spot_loss(
    fates: Fates | None, reason: str, result: str
) -> None:
    """From the closing note: a job whose Spot instance was taken was judged the user's
    failure when both the interruption warning and the terminated event were missed (no
    interruption queue configured, a message lost), although EC2 itself says why the
    instance ended: ``StateReason.Code == "Server.SpotInstanceTermination"`` in
    DescribeInstances. The stage now asks EC2 about a settled failure with no evidence,
    and a Spot end counts as a Spot loss; any other end, or none, changes nothing."""
    s, metrics, rerunner = stage_with(fates, [settled_failure()])
    (choice,) = s.step(NOW).choices
    assert (first(choice).reason, choice.result) == (reason, result)
    assert count(metrics, reason, result) == 1
    assert rerunner.calls == ([("pytorch", 101)] if result == RERUN else [])
    if fates is not None:
        assert fates.asked == [[INSTANCE]]
    if result == RERUN:
        assert f"instance {INSTANCE}: spot_terminated" in first(choice).evidence


def test_ec2_is_asked_only_once_the_failure_settled_and_within_the_grace() -> None:
    """A fresh failure waits SETTLE for a late event first (no call); one judged past
    EVENT_GRACE is not asked at all: an end EC2 reports then may have come after the job."""
    fates = Fates(SPOT_END)
    fresh = job(1, annotations=(), completed_at=NOW - timedelta(seconds=10))
    s, _, _ = stage_with(fates, [fresh])
    assert s.step(NOW).choices == ()
    assert fates.asked == []
    late = job(2, annotations=(), completed_at=NOW - EVENT_GRACE - timedelta(seconds=1))
    s2, _, rerunner = stage_with(fates, [late])
    (choice,) = s2.step(NOW).choices
    assert (first(choice).reason, choice.result) == ("user", SKIP)
    assert fates.asked == [] and rerunner.calls == []
    (settled,) = stage_with(fates, [fresh])[0].step(NOW + SETTLE).choices
    assert first(settled).reason == "spot_interruption"


def test_ec2_unreachable_the_job_waits_and_is_asked_again() -> None:
    """A failed DescribeInstances is counted and logged; the job is not judged the user's
    on the strength of a question that got no answer: it waits for the next tick."""
    fates = Fates(SPOT_END, errors=[TransientError("throttled", code="Throttling")])
    s, metrics, rerunner = stage_with(fates, [settled_failure()])
    assert s.step(NOW).choices == ()
    assert list(s.pending) == [("pytorch", 101)]
    failures = metrics.registry.get_sample_value(
        "ci_autoscaler_stage_failures_total", {"stage": "job_retry_instances"}
    )
    assert failures == 1
    (choice,) = s.step(NOW + timedelta(seconds=30)).choices
    assert (first(choice).reason, choice.result) == ("spot_interruption", RERUN)
    assert rerunner.calls == [("pytorch", 101)]
    assert len(fates.asked) == 2
