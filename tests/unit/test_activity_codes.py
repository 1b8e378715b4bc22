"""Failed scaling activities classified by the EC2 error code in AWS's StatusMessage.

Every message below is a real one. Rows marked *verbatim* are copied from where a user
pasted their Auto Scaling group's activity; rows marked *assembled* put EC2's real error
(code and text, as a user pasted it from RunInstances) into the frame AWS uses for a group
with a mixed instances policy, ``Could not launch <On-Demand|Spot> Instances. <Code> -
<EC2 message>. Launching EC2 instance failed.``, which the verbatim rows show.
"""

from __future__ import annotations

import pytest

from autoscaler.scale.aws.activities import CAPACITY, classify_activity

FRAME = "Could not launch {kind} Instances. {code} - {text} Launching EC2 instance failed."

ROWS = [
    # verbatim: cortexlabs/cortex#1258 (a GPU spot group)
    pytest.param(
        "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot"
        " capacity available that matches your request. Launching EC2 instance failed.",
        ("InsufficientInstanceCapacity", CAPACITY),
        id="spot-no-capacity",
    ),
    # verbatim: buildkite/elastic-ci-stack-for-aws#851
    pytest.param(
        "Could not launch Spot Instances. UnfulfillableCapacity - Unable to fulfill capacity"
        " due to your request configuration. Please adjust your request and try again."
        " Launching EC2 instance failed.",
        ("UnfulfillableCapacity", CAPACITY),
        id="spot-unfulfillable",
    ),
    # assembled: EC2's text from scrapoxy/scrapoxy#202 and kubernetes/kops#15778
    pytest.param(
        FRAME.format(
            kind="On-Demand",
            code="VcpuLimitExceeded",
            text="You have requested more vCPU capacity than your current vCPU limit of 384"
            " allows for the instance bucket that the specified instance type belongs to."
            " Please visit http://aws.amazon.com/contact-us/ec2-request to request an"
            " adjustment to this limit.",
        ),
        ("VcpuLimitExceeded", "quota"),
        id="vcpu-quota",
    ),
    # assembled: EC2's text from hashicorp/terraform#1891
    pytest.param(
        FRAME.format(
            kind="On-Demand",
            code="InstanceLimitExceeded",
            text="Your quota allows for 0 more running instance(s). You requested at least 1.",
        ),
        ("InstanceLimitExceeded", "quota"),
        id="instance-quota",
    ),
    # assembled: EC2's text from benishak/lamp-aws-cloudformation#1
    pytest.param(
        FRAME.format(
            kind="On-Demand",
            code="InvalidAMIID.NotFound",
            text="The image id '[ami-327f5352]' does not exist.",
        ),
        ("InvalidAMIID.NotFound", "image"),
        id="image-deleted",
    ),
    # assembled: EC2's text from machulav/ec2-github-runner#132 (a runner fleet)
    pytest.param(
        FRAME.format(
            kind="On-Demand",
            code="InvalidParameterValue",
            text="Value (GithubActionRunner) for parameter iamInstanceProfile.name is invalid."
            " Invalid IAM Instance Profile name.",
        ),
        ("InvalidParameterValue", "config"),
        id="instance-profile-missing",
    ),
    # verbatim, no code: plain launch-template groups quote EC2's English only
    # (kubernetes/kops#15778); classified as capacity, the old behaviour: fail over, back off
    pytest.param(
        "You have requested more vCPU capacity than your current vCPU limit of 384 allows"
        " for the instance bucket that the specified instance type belongs to. Please visit"
        " http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this"
        " limit. Launching EC2 instance failed.",
        ("", ""),
        id="no-code-quota-text",
    ),
    # verbatim, no code: aws/aws-parallelcluster#1944
    pytest.param(
        "There is no Spot capacity available that matches your request. Launching EC2"
        " instance failed.",
        ("", ""),
        id="no-code-capacity-text",
    ),
    # verbatim, no code: gruntwork-io/intro-to-terraform#6
    pytest.param(
        "The requested configuration is currently not supported. Please check the"
        " documentation for supported configurations. Launching EC2 instance failed.",
        ("", ""),
        id="no-code-unsupported-text",
    ),
    pytest.param("", ("", ""), id="empty"),
]


@pytest.mark.parametrize(("message", "expected"), ROWS)
def test_classified_by_the_code_in_the_message(message: str, expected: tuple[str, str]) -> None:
    assert classify_activity(message) == expected


def test_a_code_a_person_must_fix_wins_over_a_capacity_code() -> None:
    """A message naming both (several launch attempts in one activity): the quota will not
    come back by itself, the capacity might."""
    message = (
        "Could not launch On-Demand Instances. InsufficientInstanceCapacity - no capacity."
        " Could not launch Spot Instances. MaxSpotInstanceCountExceeded - Max spot instance"
        " count exceeded. Could not launch On-Demand Instances. VcpuLimitExceeded - limit."
    )
    assert classify_activity(message) == ("VcpuLimitExceeded", "quota")


def test_codes_match_as_whole_tokens_only() -> None:
    """Not free text: "InternalErrors" or a code glued into a longer dotted name is not it."""
    assert classify_activity("InternalErrors happened") == ("", "")
    assert classify_activity("x InvalidAMIID.NotFoundAtAll y") == ("", "")
    assert classify_activity("Client.InternalError: Client error on launch.") == (
        "Client.InternalError",
        "permissions",
    )
