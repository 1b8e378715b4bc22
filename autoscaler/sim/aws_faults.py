"""Inject AWS errors into a boto3 client through botocore's ``before-send`` event.

A handler on ``before-send`` runs inside botocore's retry loop (unlike ``Stubber``): it
sees every HTTP attempt, and the error it returns goes through botocore's retry logic and
error parsing exactly like a real response. Used by the adapter tests and by the demo
(an injected capacity error makes a pool fail over). :class:`CapacityOutage` answers
instead of failing: it plays a group that accepts a scale-up and then fails to launch,
the way EC2 Auto Scaling reports capacity problems (or, with another ``status_message``,
a quota, image or launch template problem). :class:`BootingInstances` plays what moto
skips: instances that are ``Pending`` for a while, on which SetInstanceProtection fails.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from xml.sax.saxutils import escape

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

PROXY_BAD_GATEWAY = (
    '<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">\n'
    "<html><head>\n<title>502 Proxy Error</title>\n</head><body>\n<h1>Proxy Error</h1>\n"
    "<p>The proxy server received an invalid\nresponse from an upstream server.<br />\n"
    "The proxy server could not handle the request<p>Reason: <strong>Error reading from "
    "remote server</strong></p></p>\n<hr>\n<address>Apache/2.4.57 (Debian) Server at "
    "autoscaling.us-east-1.amazonaws.com Port 443</address>\n</body></html>\n"
)
"""Apache mod_proxy's 502 page, as an egress proxy answers when AWS's endpoint misbehaves.
Pass as :attr:`Fault.body` (with ``status=502``): botocore cannot parse it as XML and
raises ``ResponseParserError``, which is not a ``BotoCoreError``."""


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
    ``body`` answers with that raw text (``text/html``) instead of AWS's error XML: what a
    proxy or load balancer in front of the endpoint sends (``code`` is then unused).
    ``raises`` raises that exception from the HTTP layer instead of answering (a
    connection, proxy or TLS failure), as ``code=TIMEOUT`` does for a read timeout.
    """

    operation: str
    code: str
    status: int = 400
    times: int | None = 1
    match: str | None = None
    body: str | None = None
    raises: Exception | None = None
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
        if self.raises is not None:
            raise self.raises
        # botocore calls every before-send handler; moto's in-process one (registered after
        # this) would still apply the request. Point it nowhere so nothing else serves it.
        request.url = "http://fault-injected.invalid/"
        if self.body is not None:
            headers = HTTPHeaders()
            headers["Content-Type"] = "text/html; charset=iso-8859-1"
            return AWSResponse(url, self.status, headers, _Raw(self.body.encode()))
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


_NS = "http://autoscaling.amazonaws.com/doc/2011-01-01/"
_META = (
    "<ResponseMetadata><RequestId>00000000-0000-0000-0000-000000000000</RequestId>"
    "</ResponseMetadata>"
)
_ACTIVITY = (
    "<member><ActivityId>{id}</ActivityId><AutoScalingGroupName>{group}</AutoScalingGroupName>"
    "<Description>Launching a new EC2 instance.  Status Reason: {message}"
    "</Description><Cause>At {start} an instance was started in response to a difference"
    " between desired and actual capacity.</Cause><StartTime>{start}</StartTime>"
    "<EndTime>{start}</EndTime><StatusCode>Failed</StatusCode>"
    "<StatusMessage>{message}</StatusMessage><Progress>100</Progress></member>"
)
SPOT_CAPACITY_MESSAGE = (
    "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot"
    " capacity available that matches your request. Launching EC2 instance failed."
)
"""A real StatusMessage of a spot group out of capacity (cortexlabs/cortex#1258)."""


def _operation(request: Any, kwargs: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    model = kwargs.get("model") or getattr(request, "context", {}).get("operation_model")
    body = request.body.decode() if isinstance(request.body, bytes) else str(request.body or "")
    params = {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}
    return str(getattr(model, "name", None) or params.get("Action", "")), params


@dataclass
class CapacityOutage:
    """One Auto Scaling group out of capacity the way real AWS reports it: asynchronously.

    While :attr:`active`, SetDesiredCapacity on ``group`` succeeds but launches nothing (the
    group's DesiredCapacity reads higher than its instances), and each raise adds a
    ``Failed`` scaling activity that DescribeScalingActivities returns, newest first. Other
    groups and calls reach moto untouched. :meth:`install` it on the autoscaling client of
    the pool under test; ``clock`` dates the activities (a virtual clock works).
    """

    group: str
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    active: bool = True
    status_message: str = SPOT_CAPACITY_MESSAGE
    """The Failed activities' StatusMessage (AWS's words, with its error code)."""
    pending: int = 0
    """Desired capacity asked for and never launched."""
    failed_at: list[datetime] = field(default_factory=list)
    raises: int = 0
    _described: int = 0  # the group's real (moto) desired capacity, last seen
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def install(self, client: Any) -> CapacityOutage:
        client.meta.events.register_first("before-send", self._before_send)
        client.meta.events.register("after-call.autoscaling.DescribeAutoScalingGroups", self._seen)
        return self

    def end(self) -> None:
        """Capacity is back: calls reach moto again, nothing is pending."""
        with self._lock:
            self.active, self.pending = False, 0

    def _respond(self, request: Any, xml: str) -> AWSResponse:
        request.url = "http://fault-injected.invalid/"  # nothing else serves it (see Fault)
        return AWSResponse(request.url, 200, HTTPHeaders(), _Raw(xml.encode()))

    def _before_send(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        name, params = _operation(request, kwargs)
        if not self.active or params.get("AutoScalingGroupName") != self.group:
            return None
        if name == "SetDesiredCapacity":
            with self._lock:
                wanted = int(params.get("DesiredCapacity", "0"))
                if wanted > self._described:
                    self.raises += 1
                    self.failed_at.insert(0, self.clock())
                self.pending = max(0, wanted - self._described)
            return self._respond(
                request,
                f'<SetDesiredCapacityResponse xmlns="{_NS}">{_META}</SetDesiredCapacityResponse>',
            )
        if name == "DescribeScalingActivities":
            limit = int(params.get("MaxRecords", "100"))
            members = "".join(
                _ACTIVITY.format(
                    id=f"00000000-0000-0000-0000-{n:012d}",
                    group=self.group,
                    start=at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    message=escape(self.status_message),
                )
                for n, at in enumerate(self.failed_at[:limit])
            )
            return self._respond(
                request,
                f'<DescribeScalingActivitiesResponse xmlns="{_NS}">'
                "<DescribeScalingActivitiesResult>"
                f"<Activities>{members}</Activities></DescribeScalingActivitiesResult>{_META}"
                "</DescribeScalingActivitiesResponse>",
            )
        return None

    def _seen(self, parsed: dict[str, Any], **_: Any) -> None:
        """Show the group's DesiredCapacity as raised, the way AWS does while it fails."""
        for group in parsed.get("AutoScalingGroups", []):
            if group.get("AutoScalingGroupName") == self.group:
                with self._lock:
                    self._described = int(group["DesiredCapacity"])
                    if self.active:
                        group["DesiredCapacity"] = self._described + self.pending


@dataclass
class BootingInstances:
    """Instances that are ``Pending`` for a while, as on real AWS (moto puts them in
    service at once), and SetInstanceProtection refusing them as AWS does.

    While an instance id is in :attr:`pending`, DescribeAutoScalingGroups reports it
    ``Pending``, and a SetInstanceProtection call naming it fails whole with
    ``ValidationError`` ("The instance i-... is not in InService or EnteringStandby or
    Standby.", the text AWS returns: infrahouse/infrahouse-toolkit#223,
    guardian/riff-raff#510): no instance of that batch is protected. With
    ``new_instances_pending`` every instance first seen is pending until :meth:`boot`.
    :meth:`install` it on the autoscaling client.
    """

    pending: set[str] = field(default_factory=set)
    new_instances_pending: bool = False
    rejected: int = 0
    """SetInstanceProtection calls refused."""
    _seen_ids: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def install(self, client: Any) -> BootingInstances:
        client.meta.events.register_first("before-send", self._before_send)
        client.meta.events.register(
            "after-call.autoscaling.DescribeAutoScalingGroups", self._describe
        )
        return self

    def boot(self, *instance_ids: str) -> None:
        """These instances are in service now."""
        with self._lock:
            self.pending.difference_update(instance_ids)

    def _before_send(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        name, params = _operation(request, kwargs)
        if name != "SetInstanceProtection":
            return None
        ids = [v for k, v in params.items() if k.startswith("InstanceIds.member.")]
        with self._lock:
            booting = next((i for i in ids if i in self.pending), None)
            if booting is None:
                return None
            self.rejected += 1
        request.url = "http://fault-injected.invalid/"  # nothing else serves it (see Fault)
        message = f"The instance {booting} is not in InService or EnteringStandby or Standby."
        payload = _QUERY_ERROR.format(kind="Sender", code="ValidationError", message=message)
        return AWSResponse(request.url, 400, HTTPHeaders(), _Raw(payload.encode()))

    def _describe(self, parsed: dict[str, Any], **_: Any) -> None:
        with self._lock:
            for group in parsed.get("AutoScalingGroups", []):
                for inst in group.get("Instances", []):
                    iid = inst.get("InstanceId")
                    if self.new_instances_pending and iid not in self._seen_ids:
                        self.pending.add(iid)
                    self._seen_ids.add(iid)
                    if iid in self.pending and inst.get("LifecycleState") == "InService":
                        inst["LifecycleState"] = "Pending"


@dataclass
class WarmInstances:
    """Instances in a group's warm pool, as real AWS shows them (moto keeps no warm
    instances): each id of :attr:`warm` (id -> its lifecycle state, ``Warmed:Running``)
    is left out of DescribeAutoScalingGroups (the group's DesiredCapacity counts it no
    more) and listed by DescribeWarmPool, with its state. Taking an id out of
    :attr:`warm` puts it back in service. :meth:`install` it on the autoscaling client.
    """

    group: str
    warm: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def install(self, client: Any) -> WarmInstances:
        client.meta.events.register(
            "after-call.autoscaling.DescribeAutoScalingGroups", self._describe_group
        )
        client.meta.events.register(
            "before-parameter-build.autoscaling.DescribeWarmPool", self._asked
        )
        client.meta.events.register("after-call.autoscaling.DescribeWarmPool", self._describe_warm)
        return self

    def _asked(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["warm_instances_group"] = params.get("AutoScalingGroupName")

    def _describe_group(self, parsed: dict[str, Any], **_: Any) -> None:
        with self._lock:
            for group in parsed.get("AutoScalingGroups", []):
                if group.get("AutoScalingGroupName") != self.group:
                    continue
                kept = [i for i in group.get("Instances", []) if i["InstanceId"] not in self.warm]
                hidden = len(group.get("Instances", [])) - len(kept)
                group["Instances"] = kept
                group["DesiredCapacity"] = max(0, int(group["DesiredCapacity"]) - hidden)

    def _describe_warm(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if not parsed.get("WarmPoolConfiguration"):
            return
        if context.get("warm_instances_group") != self.group:
            return
        with self._lock:
            parsed["Instances"] = [
                {"InstanceId": iid, "LifecycleState": state, "InstanceType": "g5.4xlarge"}
                for iid, state in sorted(self.warm.items())
            ]
