"""SsmParameters against moto in-process: SecureStrings tagged with their instance, deleted
idempotently, listed by path; AWS errors injected on botocore's ``before-send`` (inside
botocore's retry loop) come out as our typed errors, and throttling is retried."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, RetryConfig
from autoscaler.errors import AuthenticationError, RateLimitedError
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.aws.ssm import INSTANCE_TAG, SsmParameters
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

PATH = "/ci-autoscaler/jit"
NAME = f"{PATH}/gpu-spot/i-0123456789abcdef0"


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


class JsonFault:
    """Answer ``times`` attempts of an SSM operation (a JSON-protocol service) with an
    AWS error, as AWS would: ``{"__type": code, "message": ...}``."""

    def __init__(self, operation: str, code: str, status: int = 400, times: int = 1) -> None:
        self.operation, self.code, self.status, self.times = operation, code, status, times
        self.attempts = 0

    def __call__(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else str(target)
        if not target.endswith("." + self.operation) or self.attempts >= self.times:
            return None
        self.attempts += 1
        url, request.url = request.url, "http://fault-injected.invalid/"
        body = json.dumps({"__type": self.code, "message": "injected"}).encode()
        return AWSResponse(url, self.status, HTTPHeaders(), _Raw(body))


@pytest.fixture
def ssm(moto_in_process: boto3.session.Session) -> SsmParameters:
    return SsmParameters(AwsConfig(), Metrics(CollectorRegistry()), session=moto_in_process)


def test_put_stores_a_secure_string_tagged_with_its_instance(ssm: SsmParameters) -> None:
    ssm.put_secret(NAME, Secret("jit-1"), instance_id="i-0123456789abcdef0")
    got = ssm.ssm.get_parameter(Name=NAME, WithDecryption=True)["Parameter"]
    assert (got["Type"], got["Value"]) == ("SecureString", "jit-1")
    tags = ssm.ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId=NAME)["TagList"]
    assert {"Key": INSTANCE_TAG, "Value": "i-0123456789abcdef0"} in tags


def test_a_second_put_overwrites_and_keeps_the_tag(ssm: SsmParameters) -> None:
    """A recovery after a stop writes the new config over the old one."""
    ssm.put_secret(NAME, Secret("jit-1"), instance_id="i-0123456789abcdef0")
    ssm.put_secret(NAME, Secret("jit-2"), instance_id="i-0123456789abcdef0")
    got = ssm.ssm.get_parameter(Name=NAME, WithDecryption=True)["Parameter"]
    assert got["Value"] == "jit-2"
    tags = ssm.ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId=NAME)["TagList"]
    assert {"Key": INSTANCE_TAG, "Value": "i-0123456789abcdef0"} in tags


def test_delete_is_idempotent_and_list_finds_what_is_left(ssm: SsmParameters) -> None:
    """Of two deletes of one parameter only the first finds it: a persistent machine
    claims its token this way, and the controller learns from its own delete whether the
    machine did."""
    for n in range(55):  # more than one page of DescribeParameters (50)
        ssm.put_secret(f"{PATH}/gpu-spot/i-{n:017x}", Secret("x"), instance_id=f"i-{n:017x}")
    ssm.ssm.put_parameter(Name="/elsewhere/x", Value="y", Type="String")
    assert ssm.delete(f"{PATH}/gpu-spot/i-{0:017x}") is True
    assert ssm.delete(f"{PATH}/gpu-spot/i-{0:017x}") is False  # ParameterNotFound: gone
    names = ssm.list_names(PATH)
    assert len(names) == 54 and all(n.startswith(PATH + "/gpu-spot/") for n in names)


def test_throttling_is_retried_by_the_retry_policy(ssm: SsmParameters) -> None:
    fault = JsonFault("PutParameter", "ThrottlingException", times=2)
    ssm.ssm.meta.events.register_first("before-send", fault)
    with pytest.raises(RateLimitedError):
        ssm.put_secret(NAME, Secret("jit-1"), instance_id="i-0123456789abcdef0")
    retry = RetryPolicy(
        RetryConfig(max_attempts=3), ssm.metrics, sleep=lambda _: None, rng=random.Random(0)
    )
    retry.call(lambda: ssm.put_secret(NAME, Secret("jit-1"), instance_id="i-0123456789abcdef0"))
    assert fault.attempts == 2
    assert ssm.ssm.get_parameter(Name=NAME, WithDecryption=True)["Parameter"]["Value"] == "jit-1"


def test_access_denied_is_permanent_and_never_shows_the_value(ssm: SsmParameters) -> None:
    ssm.ssm.meta.events.register_first(
        "before-send", JsonFault("PutParameter", "AccessDeniedException")
    )
    with pytest.raises(AuthenticationError) as info:
        ssm.put_secret(NAME, Secret("jit-secret-value"), instance_id="i-0123456789abcdef0")
    assert "jit-secret-value" not in str(info.value)
    assert "jit-secret-value" not in repr(ssm)
