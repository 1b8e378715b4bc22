"""SSM Parameter Store behind the :class:`autoscaler.scale.jit.ParameterStore` port: where an
ephemeral instance finds its just-in-time runner config.

Narrowed to the three calls the controller makes, each on ``jit.parameter_path`` only (the
controller's IAM policy allows nothing else):

- ``PutParameter`` a ``SecureString`` (the account's default ``aws/ssm`` key), tagged
  ``ci-autoscaler:instance-id=<id>``: the instance role's policy lets an instance read a
  parameter only when that tag names the instance itself. A parameter is written once
  with its tag; a recovery overwrites the value (``Overwrite`` cannot carry tags, and the
  tag is already there);
- ``DeleteParameter`` (``ParameterNotFound`` is success: it is gone either way);
- ``GetParametersByPath`` (names only, recursive, paginated) to find parameters left
  behind by a stop.

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

#: The IAM actions these calls need, on ``jit.parameter_path`` only; the terraform task
#: role is checked against it (PutParameter with Tags needs AddTagsToResource too).
IAM_ACTIONS: frozenset[str] = frozenset(
    {
        "ssm:PutParameter",
        "ssm:AddTagsToResource",
        "ssm:DeleteParameter",
        "ssm:GetParametersByPath",
    }
)
#: The tag the instance role's policy matches against the reading instance's id.
INSTANCE_TAG = "ci-autoscaler:instance-id"
_EXISTS = "ParameterAlreadyExists"
_NOT_FOUND = "ParameterNotFound"


class SsmParameters:
    """JIT configs in SSM Parameter Store, over one boto3 ``ssm`` client."""

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

    def delete(self, name: str) -> None:
        try:
            self._call("delete_parameter", self.ssm.delete_parameter, Name=name)
        except _NotFound:
            return

    def list_names(self, path: str) -> list[str]:
        names: list[str] = []
        kwargs: dict[str, Any] = {"Path": path, "Recursive": True, "WithDecryption": False}
        while True:
            page = self._call("get_parameters_by_path", self.ssm.get_parameters_by_path, **kwargs)
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
    """DeleteParameter found nothing (handled inside the adapter: success)."""

    code = _NOT_FOUND
