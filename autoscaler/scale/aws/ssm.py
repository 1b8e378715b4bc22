"""SSM Parameter Store behind the :class:`autoscaler.scale.registration.ParameterStore` port:
where an instance finds its runner credential (a JIT config, or a registration token).

Narrowed to the three calls the controller makes, on ``jit.parameter_path`` (the
controller's IAM policy allows nothing else):

- ``PutParameter`` a ``SecureString`` (the account's default ``aws/ssm`` key), tagged
  ``ci-autoscaler:instance-id=<id>``: the instance role's policy lets an instance read a
  parameter only when that tag names the instance itself. A parameter is written once
  with its tag; a recovery overwrites the value (``Overwrite`` cannot carry tags, and the
  tag is already there);
- ``DeleteParameter``: ``ParameterNotFound`` is not an error (it is gone either way), but
  it is reported: a persistent instance claims its registration token by deleting the
  parameter, and the controller learns from its own delete whether the machine did;
- ``DescribeParameters`` filtered on the path (recursive, paginated) to find parameters
  left behind by a stop: names and metadata only, so no value ever travels back to the
  controller (``GetParametersByPath`` returns them, as ciphertext at best). AWS does not
  scope this action to a resource: the role grants it on ``*``, and it shows names only.

Single attempts; the caller's :class:`autoscaler.retrying.RetryPolicy` retries what
:func:`autoscaler.aws_sdk.translate` calls transient (``ThrottlingException``
included). Values never reach a log line, a metric or an exception.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import boto3
from botocore.exceptions import ClientError

from autoscaler.aws_sdk import aws_call, boto_config, client_error_code, translate
from autoscaler.config import AwsConfig
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

#: The IAM actions these calls need on ``jit.parameter_path`` only; the terraform task
#: role is checked against it (PutParameter with Tags needs AddTagsToResource too).
IAM_ACTIONS: frozenset[str] = frozenset(
    {"ssm:PutParameter", "ssm:AddTagsToResource", "ssm:DeleteParameter"}
)
#: The one action AWS cannot scope to a resource (granted on ``*``; names only).
IAM_LIST_ACTION = "ssm:DescribeParameters"
#: The tag the instance role's policy matches against the reading instance's id.
INSTANCE_TAG = "ci-autoscaler:instance-id"
_EXISTS = "ParameterAlreadyExists"
_NOT_FOUND = "ParameterNotFound"


class SsmParameters:
    """Runner credentials in SSM Parameter Store, over one boto3 ``ssm`` client."""

    def __init__(
        self,
        config: AwsConfig,
        metrics: Metrics,
        *,
        session: boto3.session.Session | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 15.0,
    ) -> None:
        session = session if session is not None else boto3.session.Session()
        cfg = boto_config(config, connect_timeout=connect_timeout, read_timeout=read_timeout)
        #: The raw client, exposed for fault injection in tests.
        self.ssm: Any = session.client(
            "ssm", region_name=config.region, endpoint_url=config.endpoint_url, config=cfg
        )
        self.metrics = metrics

    def __repr__(self) -> str:
        return "SsmParameters()"

    def put_secret(self, name: str, value: Secret, *, instance_id: str) -> None:
        try:
            self._call(
                "put_parameter",
                self.ssm.put_parameter,
                Name=name,
                Value=value.reveal(),
                Type="SecureString",
                Tags=[{"Key": INSTANCE_TAG, "Value": instance_id}],
            )
        except _Exists:
            self._call(
                "put_parameter",
                self.ssm.put_parameter,
                Name=name,
                Value=value.reveal(),
                Type="SecureString",
                Overwrite=True,
            )

    def delete(self, name: str) -> bool:
        try:
            self._call("delete_parameter", self.ssm.delete_parameter, Name=name)
        except _NotFound:
            return False
        return True

    def list_names(self, path: str) -> list[str]:
        names: list[str] = []
        kwargs: dict[str, Any] = {
            "ParameterFilters": [{"Key": "Path", "Option": "Recursive", "Values": [path]}],
            "MaxResults": 50,
        }
        while True:
            page = self._call("describe_parameters", self.ssm.describe_parameters, **kwargs)
            names += [str(p["Name"]) for p in page.get("Parameters", []) if "Name" in p]
            token = page.get("NextToken")
            if not token:
                return names
            kwargs["NextToken"] = token

    def _call(self, operation: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """One SSM call (:func:`aws_call`); the two codes the methods handle themselves
        are raised as markers."""
        return aws_call(self.metrics, operation, fn, translate_error=_translate, **kwargs)


def _translate(exc: Exception, operation: str) -> Exception:
    if isinstance(exc, ClientError):
        found, _ = client_error_code(exc)
        if found == _EXISTS:
            return _Exists()
        if found == _NOT_FOUND:
            return _NotFound()
    return translate(exc, operation)


class _Exists(Exception):
    """PutParameter without Overwrite found the name taken (handled inside the adapter)."""

    code = _EXISTS


class _NotFound(Exception):
    """DeleteParameter found nothing (handled inside the adapter: False)."""

    code = _NOT_FOUND
