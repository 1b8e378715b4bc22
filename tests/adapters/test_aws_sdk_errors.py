"""No exception of the AWS SDK leaves the adapter untranslated.

The story: an egress proxy in front of the Auto Scaling endpoint answered one call with
its HTML "502 Proxy Error" page. botocore could not parse it and raised
``botocore.parsers.ResponseParserError``, which is not a ``BotoCoreError``: it slipped past
the adapter's translation, out of ``Scaler.step``, and the controller's stage guard
dropped the rest of the scaling stage (no scale-up for any runner type that tick, a
traceback in the log, no classified problem). The same happened with a well-formed HTML
page on 200 (botocore raised a bare ``KeyError``), and a proxy that refused the connection
(``ProxyConnectionError``) was classified permanent and paged.

Faults are injected on botocore's ``before-send`` event (``autoscaler.sim.aws_faults``), so
every answer goes through botocore's real parsing and retry logic against moto.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import botocore.exceptions
import pytest
from botocore.parsers import ResponseParserError
from moto import mock_aws
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, RetryConfig
from autoscaler.errors import AuthenticationError, AutoscalerError, PermanentError, TransientError
from autoscaler.scale.aws.asg import AwsAsgPool
from autoscaler.scale.scaler import Scaler
from autoscaler.sim.aws_faults import PROXY_BAD_GATEWAY, Fault, inject, remove
from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools, moto_session
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import CPU, GPU, FakeSource, config, observation, rtype, snapshot

SPECS = [
    PoolSpec("gpu-spot", GPU, (GPU,), max_size=3),
    PoolSpec("cpu", CPU, (CPU,), max_size=5),
]
#: nginx's and an AWS load balancer's 502 page: starts with ``<html>``, which botocore
#: recognises as a generic error page (a ClientError with the status as its code).
NGINX_BAD_GATEWAY = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n</body>\r\n</html>\r\n"
)


def make_pool() -> AwsAsgPool:
    session = moto_session()
    return AwsAsgPool(AwsConfig(), Metrics(CollectorRegistry()), session=session)


@pytest.fixture(scope="module")
def shared_pool() -> Iterator[AwsAsgPool]:
    """One moto world and one adapter (building clients is the slow part): the rows below
    only fail calls, which changes nothing in it."""
    with mock_aws():
        asg, ec2 = aws_clients(None)
        create_pools(asg, ec2, SPECS)
        yield make_pool()


@pytest.fixture
def faulty(shared_pool: AwsAsgPool) -> Iterator[Callable[[Fault], Fault]]:
    """Injects faults into the shared adapter's autoscaling client, removed afterwards."""
    injected: list[Fault] = []

    def add(fault: Fault) -> Fault:
        injected.append(inject(shared_pool.autoscaling, fault))
        return fault

    yield add
    for fault in injected:
        remove(shared_pool.autoscaling, fault)


def calls(pool: AwsAsgPool, operation: str, code: str) -> float:
    labels = {"operation": operation, "code": code}
    return pool.metrics.registry.get_sample_value("ci_autoscaler_aws_calls_total", labels) or 0.0


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param(PROXY_BAD_GATEWAY, 502, "ResponseParserError", id="apache-proxy-502"),
        pytest.param(PROXY_BAD_GATEWAY, 200, "ResponseParserError", id="apache-page-on-200"),
        pytest.param(NGINX_BAD_GATEWAY, 502, "502", id="nginx-502"),
        pytest.param(NGINX_BAD_GATEWAY, 200, "KeyError", id="well-formed-html-on-200"),
    ],
)
def test_an_html_page_instead_of_aws_is_transient(
    shared_pool: AwsAsgPool, faulty: Callable[[Fault], Fault], body: str, status: int, code: str
) -> None:
    """A proxy's HTML instead of AWS's XML is a hiccup of the path, not of the request:
    transient (retried within the bound), with a bounded code for the metric."""
    operation = "DescribeAutoScalingGroups"
    before = calls(shared_pool, operation, code)
    fault = faulty(Fault(operation, "", status=status, body=body))
    with pytest.raises(TransientError) as info:
        shared_pool.describe(["cpu"])
    assert (type(info.value), info.value.code) == (TransientError, code)
    assert fault.injected == 1
    assert calls(shared_pool, operation, code) == before + 1


def _sdk_exception_types() -> list[type[Exception]]:
    """Every exception botocore defines (warnings and ClientError, which only a parsed
    AWS answer makes and the code table covers, aside), plus ResponseParserError."""
    found: list[type[Exception]] = [ResponseParserError]
    for value in vars(botocore.exceptions).values():
        if (
            isinstance(value, type)
            and issubclass(value, Exception)
            and not issubclass(value, Warning | botocore.exceptions.ClientError)
        ):
            found.append(value)
    return sorted(set(found), key=lambda t: t.__name__)


def _instance(cls: type[Exception]) -> Exception:
    exc = cls.__new__(cls)
    Exception.__init__(exc, f"injected {cls.__name__}")
    return exc


@pytest.mark.parametrize("error", _sdk_exception_types(), ids=lambda t: t.__name__)
def test_no_sdk_exception_escapes_the_adapter(
    shared_pool: AwsAsgPool, faulty: Callable[[Fault], Fault], error: type[Exception]
) -> None:
    """Whatever botocore raises inside a call, the scaler sees our error tree."""
    faulty(Fault("SetDesiredCapacity", "", raises=_instance(error)))
    with pytest.raises(AutoscalerError):
        shared_pool.set_desired_capacity("cpu", 1)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(
            botocore.exceptions.ProxyConnectionError(proxy_url="http://proxy:3128", error="x"),
            TransientError,
            id="proxy-refused",
        ),
        pytest.param(
            botocore.exceptions.SSLError(endpoint_url="https://x", error=OSError("x")),
            TransientError,
            id="tls-failure",
        ),
        pytest.param(
            botocore.exceptions.IncompleteReadError(actual_bytes=10, expected_bytes=99),
            TransientError,
            id="response-cut-short",
        ),
        pytest.param(
            botocore.exceptions.CredentialRetrievalError(provider="container-role", error_msg="x"),
            TransientError,
            id="task-role-endpoint-down",
        ),
        pytest.param(
            botocore.exceptions.CapacityNotAvailableError(),
            TransientError,
            id="botocore-retry-quota-spent",
        ),
        pytest.param(botocore.exceptions.NoCredentialsError(), AuthenticationError, id="no-creds"),
        pytest.param(
            botocore.exceptions.ParamValidationError(report="x"), PermanentError, id="bad-params"
        ),
    ],
)
def test_sdk_errors_without_an_aws_code_are_classified_by_type(
    shared_pool: AwsAsgPool,
    faulty: Callable[[Fault], Fault],
    error: Exception,
    expected: type[AutoscalerError],
) -> None:
    faulty(Fault("SetDesiredCapacity", "", raises=error))
    with pytest.raises(AutoscalerError) as info:
        shared_pool.set_desired_capacity("cpu", 1)
    assert type(info.value) is expected


def test_a_proxy_error_page_does_not_abort_the_scaling_stage(
    shared_pool: AwsAsgPool, faulty: Callable[[Fault], Fault]
) -> None:
    """The regression itself: the GPU pool's scale-up meets the proxy's 502 page on every
    attempt; the CPU pool still scales up in the same step, the GPU failure is retried
    within the bound and is not a page (transient, not permanent). (Last in the module:
    it is the one that changes the shared world.)"""
    pool = shared_pool
    fault = faulty(
        Fault(
            "SetDesiredCapacity",
            "",
            status=502,
            body=PROXY_BAD_GATEWAY,
            times=None,
            match="gpu-spot",
        )
    )
    cfg = config(
        rtype(GPU, pools=("gpu-spot",), boot_timeout=86400.0),
        rtype(CPU, pools=("cpu",), boot_timeout=86400.0),
    )
    cfg = cfg.model_copy(update={"aws": AwsConfig(retry=RetryConfig(max_attempts=3))})
    source = FakeSource()
    scaler = Scaler(
        pool,
        source,
        cfg,
        pool.metrics,
        sleep=lambda _: None,
        rng=random.Random(1),
        **handover_ports(source),
    )
    now = datetime.now(UTC)
    decisions = scaler.step(
        snapshot({GPU: 2, CPU: 3}, at=now), observation([], now), now, observation_fresh=True
    )
    assert {d.pool: d.desired for d in decisions} == {"gpu-spot": 0, "cpu": 3}
    assert pool.describe(["cpu"])["cpu"].desired_capacity == 3
    assert fault.injected == 3  # every attempt of the bound, then next tick
    assert scaler.last_problems == []  # transient: not a page
    retries = pool.metrics.registry.get_sample_value(
        "ci_autoscaler_cloud_retries_total", {"pool": "gpu-spot", "error_class": "transient"}
    )
    assert retries == 2
