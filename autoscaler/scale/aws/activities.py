"""Why a Failed scaling activity failed: the EC2 error code in its StatusMessage -> a class.

EC2 Auto Scaling reports a launch it could not make as a ``Failed`` activity whose
``StatusMessage`` quotes EC2's answer. Groups with a mixed instances policy (how spot pools
are built) quote EC2's error code in it::

    Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot
    capacity available that matches your request. Launching EC2 instance failed.

We classify by the known codes that appear in the message, as whole tokens, through
:data:`ACTIVITY_CODES`; never by the English around them. Two classes:

- ``capacity``: capacity may come back by itself. Fail over to the next pool, back off.
- everything else (``quota``, ``image``, ``launch_template``, ``network``, ``permissions``,
  ``config``): a person must act. Page at once with AWS's message; back off for
  ``capacity_backoff_max`` instead of failing over quietly forever.

A message with no known code (plain launch-template groups quote only EC2's English, e.g.
``You have requested more vCPU capacity than your current vCPU limit of 384 allows ...``)
is treated as capacity, as before: fail over and back off; the "every pool out of
capacity" alert still fires when no pool of the type can launch.
"""

from __future__ import annotations

import re

CAPACITY = "capacity"

ACTIVITY_CODES: dict[str, str] = {
    # capacity: may come back by itself
    "InsufficientInstanceCapacity": CAPACITY,
    "Server.InsufficientInstanceCapacity": CAPACITY,
    "InsufficientCapacity": CAPACITY,
    "InsufficientHostCapacity": CAPACITY,
    "InsufficientReservedInstanceCapacity": CAPACITY,
    "UnfulfillableCapacity": CAPACITY,
    "MaxSpotInstanceCountExceeded": CAPACITY,  # spot quota: on-demand is the fallback
    "SpotMaxPriceTooLow": CAPACITY,
    "Server.InternalError": CAPACITY,
    "InternalError": CAPACITY,
    # quota: a Service Quotas request
    "VcpuLimitExceeded": "quota",
    "InstanceLimitExceeded": "quota",
    "VolumeLimitExceeded": "quota",
    "Client.VolumeLimitExceeded": "quota",
    "PendingVerification": "quota",
    # the image
    "InvalidAMIID.NotFound": "image",
    "InvalidAMIID.Malformed": "image",
    "InvalidAMIID.Unavailable": "image",
    # the launch template
    "InvalidLaunchTemplateId.NotFound": "launch_template",
    "InvalidLaunchTemplateId.Malformed": "launch_template",
    "InvalidLaunchTemplateId.VersionNotFound": "launch_template",
    "InvalidLaunchTemplateName.NotFoundException": "launch_template",
    "InvalidBlockDeviceMapping": "launch_template",
    "InvalidKeyPair.NotFound": "launch_template",
    "InvalidParameterValue": "config",
    "InvalidParameterCombination": "config",
    "Unsupported": "config",
    "OptInRequired": "config",
    # the network
    "InvalidGroup.NotFound": "network",
    "InvalidSubnetID.NotFound": "network",
    "InvalidSubnet": "network",
    # permissions (the instance profile, a KMS key for the volumes)
    "UnauthorizedOperation": "permissions",
    "AccessDenied": "permissions",
    "AuthFailure": "permissions",
    "Client.InternalError": "permissions",
}

_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)*")


def classify_activity(message: str) -> tuple[str, str]:
    """(code, class) of a Failed activity's StatusMessage; ("", "") when it names no known
    code. When it names several, one a person must fix wins over a capacity one."""
    found = [(t, ACTIVITY_CODES[t]) for t in _TOKEN.findall(message) if t in ACTIVITY_CODES]
    for code, kind in found:
        if kind != CAPACITY:
            return code, kind
    return found[0] if found else ("", "")
