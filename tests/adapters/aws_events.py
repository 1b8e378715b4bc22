"""AWS's own sample EventBridge events (the EC2 User Guide's "Spot Instance interruption
notices", "EC2 instance rebalance recommendations" and the EventBridge reference's "EC2
Instance State-change Notification"), as EventBridge hands them to an SQS target: the
event is the message body. Only the instance id is ours to fill in; the samples' own
placeholder ``time`` (``yyyy-mm-ddThh:mm:ssZ``) is kept on purpose: the reader must cope."""

from __future__ import annotations

import json
from typing import Any


def spot_warning(instance: str, action: str = "terminate") -> dict[str, Any]:
    return {
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "yyyy-mm-ddThh:mm:ssZ",
        "region": "us-east-2",
        "resources": [f"arn:aws:ec2:us-east-2:123456789012:instance/{instance}"],
        "detail": {"instance-id": instance, "instance-action": action},
    }


def rebalance(instance: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": "EC2 Instance Rebalance Recommendation",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "yyyy-mm-ddThh:mm:ssZ",
        "region": "us-east-2",
        "resources": [f"arn:aws:ec2:us-east-2:123456789012:instance/{instance}"],
        "detail": {"instance-id": instance},
    }


def state_change(instance: str, state: str = "terminated") -> dict[str, Any]:
    return {
        "version": "0",
        "id": "7bf73129-1428-4cd3-a780-95db273d1602",
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2021-11-11T21:29:54Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance}"],
        "detail": {"instance-id": instance, "state": state},
    }


def body(event: dict[str, Any]) -> str:
    return json.dumps(event)


def asg_terminated(instance: str, group: str) -> dict[str, Any]:
    """The EC2 Auto Scaling User Guide's "EC2 Instance Terminate Successful" sample."""
    return {
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": "EC2 Instance Terminate Successful",
        "source": "aws.autoscaling",
        "account": "123456789012",
        "time": "yyyy-mm-ddThh:mm:ssZ",
        "region": "us-west-2",
        "resources": [
            "auto-scaling-group-arn",
            f"arn:aws:ec2:us-west-2:123456789012:instance/{instance}",
        ],
        "detail": {
            "StatusCode": "InProgress",
            "Description": f"Terminating EC2 instance: {instance}",
            "AutoScalingGroupName": group,
            "ActivityId": "87654321-4321-4321-4321-210987654321",
            "Details": {"Availability Zone": "us-west-2b", "Subnet ID": "subnet-12345678"},
            "RequestId": "12345678-1234-1234-1234-123456789012",
            "StatusMessage": "",
            "EndTime": "yyyy-mm-ddThh:mm:ssZ",
            "EC2InstanceId": instance,
            "StartTime": "yyyy-mm-ddThh:mm:ssZ",
            "Cause": "description-text",
        },
    }
