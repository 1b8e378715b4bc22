"""AwsAsgPool.instance_ends: EC2's StateReason translated into InstanceEnd at the edge.

moto (5.x) sets ``StateReason`` only for the calls it implements (a user's terminate or
stop: ``Client.UserInitiatedShutdown``); nothing in its API makes Spot take an instance,
so it never reports ``Server.SpotInstanceTermination``. The translation of EC2's Spot
codes is therefore checked with botocore's Stubber on the adapter's own ec2 client (the
documented DescribeInstances shape, validated against botocore's service model), and
the rest against moto.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig
from autoscaler.errors import TransientError
from autoscaler.job_retry.model import InstanceEnd
from autoscaler.job_retry.stage import InstanceFates
from autoscaler.scale.aws.asg import AwsAsgPool
from autoscaler.sim.fleet import moto_session
from autoscaler.telemetry import Metrics

IID = "i-0abc123def4567890"


def make_pool() -> AwsAsgPool:
    session = moto_session()
    return AwsAsgPool(
        AwsConfig(botocore_max_attempts=1), Metrics(CollectorRegistry()), session=session
    )


def described(state: str, reason: dict[str, str] | None) -> dict[str, Any]:
    """A DescribeInstances answer for IID, as EC2 documents it."""
    instance: dict[str, Any] = {
        "InstanceId": IID,
        "LaunchTime": datetime(2026, 11, 30, 3, 0, tzinfo=UTC),
        "State": {"Code": {"running": 16, "stopped": 80}.get(state, 48), "Name": state},
    }
    if reason is not None:
        instance["StateReason"] = reason
    return {"Reservations": [{"ReservationId": "r-1", "Instances": [instance]}]}


def spot(code: str) -> dict[str, str]:
    return {"Code": code, "Message": f"{code}: Spot instance terminated due to price or capacity"}


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        pytest.param(
            "terminated",
            spot("Server.SpotInstanceTermination"),
            InstanceEnd(IID, spot=True, code="Server.SpotInstanceTermination"),
            id="spot-terminated",
        ),
        pytest.param(
            "shutting-down",
            spot("Server.SpotInstanceTermination"),
            InstanceEnd(IID, spot=True, code="Server.SpotInstanceTermination"),
            id="spot-shutting-down",
        ),
        pytest.param(
            "stopped",
            spot("Server.SpotInstanceShutdown"),
            InstanceEnd(IID, spot=True, code="Server.SpotInstanceShutdown"),
            id="spot-stopped",
        ),
        pytest.param(
            "terminated",
            {"Code": "Client.UserInitiatedShutdown", "Message": "User initiated shutdown"},
            InstanceEnd(IID, spot=False, code="Client.UserInitiatedShutdown"),
            id="user-terminated",
        ),
        pytest.param(
            "terminated",
            {"Code": "Server.InternalError", "Message": "Spot spot spot"},  # text never read
            InstanceEnd(IID, spot=False, code="Server.InternalError"),
            id="message-mentioning-spot-is-not-spot",
        ),
        pytest.param("terminated", None, InstanceEnd(IID, spot=False), id="no-state-reason"),
        pytest.param("running", None, None, id="running-absent"),
    ],
)
def test_state_reason_codes_are_translated_at_the_edge(
    state: str, reason: dict[str, str] | None, expected: InstanceEnd | None
) -> None:
    """EC2 says why an instance ended in ``StateReason.Code``, a documented code; the
    adapter compares that code (never the message) and hands the stage a domain value."""
    pool = make_pool()
    with Stubber(pool.ec2) as stub:
        stub.add_response(
            "describe_instances",
            described(state, reason),
            {"Filters": [{"Name": "instance-id", "Values": [IID]}]},
        )
        ends = pool.instance_ends([IID])
        stub.assert_no_pending_responses()
    assert ends == ({} if expected is None else {IID: expected})


def test_a_throttled_describe_is_our_transient_error() -> None:
    pool = make_pool()
    with Stubber(pool.ec2) as stub:
        stub.add_client_error("describe_instances", "RequestLimitExceeded", http_status_code=503)
        with pytest.raises(TransientError):
            pool.instance_ends([IID])


@pytest.fixture
def moto_pool(moto_in_process: boto3.session.Session) -> tuple[AwsAsgPool, Any]:
    return make_pool(), moto_in_process.client("ec2")


def test_against_moto_a_terminated_instance_is_an_end_a_running_one_is_not(
    moto_pool: tuple[AwsAsgPool, Any],
) -> None:
    """moto's own StateReason for a user's terminate comes through as a non-Spot end; a
    running instance and an id EC2 does not know are absent (no error: the lookup is by
    filter, as an instance EC2 has forgotten must not fail the others)."""
    pool, ec2 = moto_pool
    images = ec2.describe_images(Owners=["amazon"])["Images"]
    started = ec2.run_instances(ImageId=images[0]["ImageId"], MinCount=2, MaxCount=2)
    gone, alive = (i["InstanceId"] for i in started["Instances"])
    ec2.terminate_instances(InstanceIds=[gone])
    ends = pool.instance_ends([gone, alive, "i-00000000000000fff"])
    assert ends == {gone: InstanceEnd(gone, spot=False, code="Client.UserInitiatedShutdown")}
    assert isinstance(pool, InstanceFates)  # the stage's port, as wiring checks it
