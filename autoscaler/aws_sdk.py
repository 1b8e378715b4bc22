"""The AWS SDK's edge, shared by every boto3 adapter (Auto Scaling, EC2, SSM, SQS, DynamoDB).

- :func:`boto_config`: region, explicit timeouts, botocore's own retries bounded.
- :func:`aws_call`: one call, timed and counted in ``aws_calls_total`` and
  ``aws_call_duration_seconds`` by operation and error code, whatever the SDK raised
  translated into our error tree.
- :func:`translate`: botocore errors -> our error tree, by error code or type (never by
  message text), with this table:

| AWS error                                                     | class          |
|---------------------------------------------------------------|----------------|
| Throttling, RequestLimitExceeded, ... (rate limits)            | RateLimitedError |
| 5xx, InternalError, ServiceUnavailable, timeouts, connection   | TransientError |
| ScalingActivityInProgress, ResourceContention                  | DeferredError  |
| InsufficientInstanceCapacity, UnfulfillableCapacity,           | CapacityError  |
| MaxSpotInstanceCountExceeded                                   |                |
| AccessDenied, UnauthorizedOperation (credentials/permissions)  | AuthenticationError |
| ValidationError, InvalidParameterValue, LimitExceeded, others  | PermanentError |

An unknown code is transient when the HTTP status is 5xx and permanent otherwise: an
unknown 4xx will not fix itself, and alerting on it is how we learn about it.

Errors with no AWS error code, by type:

| raised inside the SDK call                                     | class          |
|----------------------------------------------------------------|----------------|
| timeouts, connection/proxy/TLS failures, a response cut short   | TransientError |
| a response botocore cannot parse (``ResponseParserError``: an   | TransientError |
| HTML error page from a proxy or load balancer, even with 200)   |                |
| botocore's client-side retry quota spent, credentials endpoint  | TransientError |
| (ECS task role, IMDS) not answering                             |                |
| no or partial credentials                                       | AuthenticationError |
| any other ``BotoCoreError`` (bad parameters, configuration)     | PermanentError |
| anything else (botocore tripping over an unexpected answer,     | TransientError |
| e.g. a ``KeyError`` on well-formed HTML)                        |                |

Every adapter goes through :func:`aws_call` (or translates at its own edge with
:func:`translate`), so no botocore (or other) exception leaves an adapter and aborts a
stage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.config import Config as BotoConfig
from botocore.exceptions import (
    BotoCoreError,
    CapacityNotAvailableError,
    ChecksumError,
    ClientError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    MetadataRetrievalError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.parsers import ResponseParserError

from autoscaler.config import AwsConfig
from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    CapacityError,
    DeferredError,
    PermanentError,
    RateLimitedError,
    TransientError,
)
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

RATE_LIMIT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "EC2ThrottledException",
        "SlowDown",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
    }
)
DEFERRED_CODES = frozenset({"ScalingActivityInProgress", "ResourceContention"})
CAPACITY_CODES = frozenset(
    {"InsufficientInstanceCapacity", "UnfulfillableCapacity", "MaxSpotInstanceCountExceeded"}
)
AUTH_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "AuthFailure",
        "InvalidClientTokenId",
        "ExpiredToken",
        "UnrecognizedClientException",
    }
)
PERMANENT_CODES = frozenset(
    {"ValidationError", "InvalidParameterValue", "InvalidParameterCombination", "LimitExceeded"}
)


#: botocore errors without an AWS error code that waiting can cure: a response cut short
#: or corrupted in transit, botocore's client-side retry quota spent, the credentials
#: endpoint (ECS task role, IMDS) not answering.
_TRANSIENT_TYPES = (
    IncompleteReadError,
    ChecksumError,
    FlexibleChecksumError,
    CapacityNotAvailableError,
    CredentialRetrievalError,
    MetadataRetrievalError,
)


def client_error_code(exc: ClientError) -> tuple[str, int]:
    """The error code and HTTP status of a ClientError ("" and 0 when absent)."""
    error = exc.response.get("Error", {})
    code = str(error.get("Code", "") or "")
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def translate(exc: Exception, operation: str) -> AutoscalerError:
    """Our error for a botocore exception raised by ``operation``; carries ``.code``."""
    if isinstance(exc, ClientError):
        code, status = client_error_code(exc)
        message = f"AWS {operation} failed: {code or status}"
        if code in RATE_LIMIT_CODES:
            return RateLimitedError(message, code=code)
        if code in TRANSIENT_CODES:
            return TransientError(message, code=code)
        if code in DEFERRED_CODES:
            return DeferredError(message, code=code)
        if code in CAPACITY_CODES:
            return CapacityError(message, code=code)
        if code in AUTH_CODES:
            return AuthenticationError(message, code=code)
        if code in PERMANENT_CODES:
            return PermanentError(message, code=code)
        if status >= 500:
            return TransientError(message, code=code or str(status))
        return PermanentError(message, code=code or str(status) or "Unknown")
    if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
        return TransientError(f"AWS {operation} timed out", code="Timeout")
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return TransientError(f"AWS {operation}: connection failed", code="ConnectionError")
    if isinstance(exc, ResponseParserError):
        return TransientError(
            f"AWS {operation}: unparseable response (an HTML error page from a proxy?)",
            code="ResponseParserError",
        )
    if isinstance(exc, _TRANSIENT_TYPES):
        return TransientError(
            f"AWS {operation} failed: {type(exc).__name__}", code=type(exc).__name__
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return AuthenticationError(f"AWS {operation}: no credentials", code="NoCredentials")
    if isinstance(exc, BotoCoreError):
        return PermanentError(
            f"AWS {operation} failed: {type(exc).__name__}", code=type(exc).__name__
        )
    # Not botocore's own error type: botocore tripped over an answer it did not expect
    # (seen: a KeyError on well-formed HTML with status 200). The request went out; the
    # answer was not AWS's. Retry within the bound; the code names the type.
    return TransientError(
        f"AWS {operation}: the SDK failed on the response ({type(exc).__name__})",
        code=type(exc).__name__,
    )


def boto_config(config: AwsConfig, *, connect_timeout: float, read_timeout: float) -> BotoConfig:
    """botocore client config: region, explicit timeouts, and botocore's retries bounded."""
    return BotoConfig(
        region_name=config.region,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"total_max_attempts": config.botocore_max_attempts, "mode": "standard"},
    )


def aws_call(
    metrics: Metrics,
    operation: str,
    fn: Callable[..., Any],
    /,
    *,
    translate_error: Callable[[Exception, str], Exception] = translate,
    answered: Callable[[Mapping[str, Any]], None] | None = None,
    **kwargs: Any,
) -> Any:
    """``fn(**kwargs)``, timed and counted in ``aws_calls_total`` and
    ``aws_call_duration_seconds`` by ``operation`` and error code ("" on success).

    ``translate_error`` turns what the SDK raised into the exception raised instead (it
    must carry ``.code``); ``answered`` sees every answer AWS sent, a success's body or a
    ClientError's response (the ASG adapter reads AWS's clock from it).
    """
    started = time.perf_counter()
    code = ""
    try:
        result = fn(**kwargs)
        if answered is not None and isinstance(result, Mapping):
            answered(result)
        return result
    except Exception as exc:  # the SDK's edge: whatever it raises is translated
        if answered is not None and isinstance(exc, ClientError):
            answered(exc.response)
        error = translate_error(exc, operation)
        code = str(getattr(error, "code", ""))
        if not isinstance(exc, ClientError | BotoCoreError):
            log.warning("AWS %s: %s inside the SDK call", operation, type(exc).__name__)
        raise error from None
    finally:
        metrics.aws_calls.labels(operation, code).inc()
        metrics.aws_call_duration.labels(operation, code).observe(time.perf_counter() - started)
