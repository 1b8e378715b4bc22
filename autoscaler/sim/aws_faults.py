"""Inject AWS errors into a boto3 client through botocore's ``before-send`` event.

A handler on ``before-send`` runs inside botocore's retry loop (unlike ``Stubber``): it
sees every HTTP attempt, and the error it returns goes through botocore's retry logic and
error parsing exactly like a real response. Used by the adapter tests and by the demo
(an injected capacity error makes a pool fail over).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ReadTimeoutError

_QUERY_ERROR = (
    '<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><Error>'
    "<Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message></Error>"
    "<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>"
)
_EC2_ERROR = (
    "<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
    "<RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>"
)
TIMEOUT = "__timeout__"
"""Pass as ``code`` to raise a read timeout instead of returning an error response."""


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


@dataclass
class Fault:
    """Fail ``times`` attempts of ``operation`` (e.g. "SetDesiredCapacity") with ``code``.

    ``match`` restricts it to requests whose body contains that text (e.g. a group name);
    ``times=None`` fails forever. ``attempts`` counts every attempt the handler saw.
    """

    operation: str
    code: str
    status: int = 400
    times: int | None = 1
    match: str | None = None
    attempts: int = 0
    injected: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        model = kwargs.get("model") or getattr(request, "context", {}).get("operation_model")
        name = getattr(model, "name", None)
        if name is None:
            body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
            name = next((p[7:] for p in body.split("&") if p.startswith("Action=")), "")
        if name != self.operation:
            return None
        body_text = (
            request.body.decode() if isinstance(request.body, bytes) else str(request.body or "")
        )
        if self.match is not None and self.match not in body_text:
            return None
        with self._lock:
            self.attempts += 1
            if self.times is not None and self.injected >= self.times:
                return None
            self.injected += 1
        url = request.url
        if self.code == TIMEOUT:
            raise ReadTimeoutError(endpoint_url=url)
        # botocore calls every before-send handler; moto's in-process one (registered after
        # this) would still apply the request. Point it nowhere so nothing else serves it.
        request.url = "http://fault-injected.invalid/"
        ec2 = "ec2." in url or "Version=2016-11-15" in body_text
        template = _EC2_ERROR if ec2 else _QUERY_ERROR
        kind = "Receiver" if self.status >= 500 else "Sender"
        payload = template.format(kind=kind, code=self.code, message="injected fault").encode()
        return AWSResponse(url, self.status, HTTPHeaders(), _Raw(payload))


def inject(client: Any, fault: Fault) -> Fault:
    """Register ``fault`` on ``client`` (a boto3 client); returns it for its counters."""
    client.meta.events.register_first("before-send", fault)
    return fault


def remove(client: Any, fault: Fault) -> None:
    client.meta.events.unregister("before-send", fault)
