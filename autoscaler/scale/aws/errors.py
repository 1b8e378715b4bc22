"""botocore errors -> our error tree, by error code (never by message text).

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
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ReadTimeoutError,
)

from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    CapacityError,
    DeferredError,
    PermanentError,
    RateLimitedError,
    TransientError,
)

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
    if isinstance(exc, EndpointConnectionError | ConnectionClosedError | HTTPClientError):
        return TransientError(f"AWS {operation}: connection failed", code="ConnectionError")
    if isinstance(exc, NoCredentialsError):
        return AuthenticationError(f"AWS {operation}: no credentials", code="NoCredentials")
    if isinstance(exc, BotoCoreError):
        return PermanentError(
            f"AWS {operation} failed: {type(exc).__name__}", code=type(exc).__name__
        )
    return PermanentError(f"AWS {operation} failed: {type(exc).__name__}", code="Unknown")
