"""The sections that name AWS resources: ``aws`` (region, endpoint, retries, the Spot
interruption queue) and ``state`` (the SQLite file, or the DynamoDB table and its lease).

Each checks the names AWS would refuse (a queue URL, a table name) at load rather than at
the first call, and refuses a key of the backend not chosen rather than ignore it. Read
into :class:`~autoscaler.config.schema.AwsConfig` and
:class:`~autoscaler.config.schema.StateConfig` by :mod:`autoscaler.config.load`.
"""

from __future__ import annotations

import re
from typing import Any

from autoscaler.config.reader import Reader
from autoscaler.config.schema import (
    DEFAULT_STATE_PATH,
    DYNAMODB,
    MIN_LEASE_DURATION,
    SQLITE,
    AwsConfig,
    RetryConfig,
    StateConfig,
)
from autoscaler.secrets import shown

#: DynamoDB's table-name rule.
_TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")


def read_aws(r: Reader, value: Any) -> AwsConfig:
    m = r.mapping(
        value,
        "aws",
        ("region", "endpoint_url", "retry", "botocore_max_attempts", "interruption_queue_url"),
    )
    rt = r.mapping(
        m.get("retry"), "aws.retry", ("max_attempts", "deadline", "initial_backoff", "max_backoff")
    )
    return AwsConfig(
        region=r.string(m.get("region"), "aws.region", "us-east-1"),
        endpoint_url=r.optional_string(m.get("endpoint_url"), "aws.endpoint_url"),
        retry=RetryConfig(
            max_attempts=r.integer(rt.get("max_attempts"), "aws.retry.max_attempts", 4, minimum=1),
            deadline=r.duration(rt.get("deadline"), "aws.retry.deadline", 30.0, positive=True),
            initial_backoff=r.duration(rt.get("initial_backoff"), "aws.retry.initial_backoff", 0.5),
            max_backoff=r.duration(rt.get("max_backoff"), "aws.retry.max_backoff", 8.0),
        ),
        botocore_max_attempts=r.integer(
            m.get("botocore_max_attempts"), "aws.botocore_max_attempts", 1, minimum=1
        ),
        interruption_queue_url=_queue_url(r, m.get("interruption_queue_url")),
    )


def _queue_url(r: Reader, value: Any) -> str | None:
    """An SQS queue URL (``https://sqs.REGION.amazonaws.com/ACCOUNT/NAME``, or moto's)."""
    path = "aws.interruption_queue_url"
    url = r.optional_string(value, path)
    if url is not None and r.ok(path) and not url.startswith(("http://", "https://")):
        r.problem(path, f"must be an SQS queue URL (https://...), got {shown(url)}")
        return None
    return url


def read_state(r: Reader, value: Any) -> StateConfig:
    """``backend: sqlite`` takes ``path``; ``backend: dynamodb`` takes ``table`` (required)
    and ``lease_duration``. A key of the other backend is refused rather than ignored."""
    m = r.mapping(value, "state", ("backend", "path", "table", "lease_duration"))
    backend = r.choice(m.get("backend"), "state.backend", (SQLITE, DYNAMODB), SQLITE)
    path = r.string(m.get("path"), "state.path", DEFAULT_STATE_PATH)
    table = r.string(m.get("table"), "state.table", "")
    lease = r.duration(m.get("lease_duration"), "state.lease_duration", 30.0)
    if backend == DYNAMODB:
        if "path" in m:
            r.problem("state.path", "is the SQLite file; backend dynamodb keeps state in a table")
        if not table and r.ok("state.table"):
            r.problem("state.table", "is required with backend dynamodb (the table's name)")
        elif table and not _TABLE_NAME.fullmatch(table):
            r.problem(
                "state.table",
                "must be 3-255 characters of letters, digits, '_', '-' or '.' "
                f"(a DynamoDB table name), got {shown(table)}",
            )
        if r.ok("state.lease_duration") and lease < MIN_LEASE_DURATION:
            r.problem(
                "state.lease_duration",
                f"must be at least {MIN_LEASE_DURATION:.0f}s (renewed every third of it)",
            )
    else:
        for key in ("table", "lease_duration"):
            if key in m:
                r.problem(f"state.{key}", "applies to backend dynamodb only (set state.backend)")
    return StateConfig(backend=backend, path=path, table=table, lease_duration=lease)
