"""RunnerPool over EC2 Auto Scaling groups (boto3), narrowed to the calls we use.

Calls: autoscaling DescribeAutoScalingGroups, DescribeScalingActivities (one page of the
most recent, only for a group whose desired capacity exceeds its live instances: that is
where EC2 Auto Scaling reports a launch it could not make), SetDesiredCapacity
(HonorCooldown=False), SetInstanceProtection, TerminateInstanceInAutoScalingGroup
(decrementing the desired capacity), the warm pool calls (DescribeWarmPool, PutWarmPool,
DeleteWarmPool: :meth:`AwsAsgPool.describe_warm_pool`, the ``WarmPools`` port of
:mod:`autoscaler.scale.warm`) and ec2 DescribeInstances (for launch times, and
for how an instance ended: :meth:`AwsAsgPool.instance_ends`, the job-retry stage's port).
:data:`IAM_ACTIONS` lists the IAM actions exactly these calls need; the terraform task
role is checked against it.

Each method makes single attempts (botocore's own retries are set to
``aws.botocore_max_attempts``); the caller wraps them in :class:`autoscaler.retrying.RetryPolicy`.
Every call is timed by operation and error code through :meth:`AwsAsgPool._call`, and
whatever the SDK call raises is translated (:mod:`autoscaler.aws_sdk`) before it
leaves: no botocore exception reaches the scaler.

Failed scaling activities carry AWS's StatusMessage and its classification by the error
code found in it (:mod:`autoscaler.scale.aws.activities`). Every answer's ``Date`` header
(botocore's response metadata) gives AWS's clock against ours: :meth:`AwsAsgPool.clock_skew`
and ``ci_autoscaler_clock_skew_seconds{peer="aws"}``; instance launch times are AWS's clock.

Runner <-> instance: a runner is named ``f"{pool}-{instance_id}"``
(:func:`autoscaler.ports.instance_id_of`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import boto3

from autoscaler.aws_sdk import aws_call, boto_config
from autoscaler.config import AwsConfig
from autoscaler.domain import (
    ActivityStatus,
    Instance,
    InstanceLifecycle,
    PoolState,
    ScalingActivity,
    WarmPoolSpec,
    WarmPoolState,
)
from autoscaler.job_retry.model import InstanceEnd
from autoscaler.scale.aws.activities import CAPACITY, classify_activity
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

IAM_ACTIONS: frozenset[str] = frozenset(
    {
        "autoscaling:DescribeAutoScalingGroups",
        "autoscaling:DescribeScalingActivities",
        "autoscaling:DescribeWarmPool",
        "autoscaling:DeleteWarmPool",
        "autoscaling:PutWarmPool",
        "autoscaling:SetDesiredCapacity",
        "autoscaling:SetInstanceProtection",
        "autoscaling:TerminateInstanceInAutoScalingGroup",
        "ec2:DescribeInstances",
    }
)

_GROUPS_PER_PAGE = 100  # DescribeAutoScalingGroups MaxRecords limit
_IDS_PER_FILTER = 200  # DescribeInstances filter value limit
#: New instances' launch times are looked up at most this often (seconds): a tick woken
#: by a queued webhook right after a scale-up must not wait for the launch times of the
#: instances that scale-up started (a DescribeInstances on every woken tick was slow).
#: Until looked up an instance's ``launched_at`` is None, which the policy and the
#: diagnosis read as "young": it was launched seconds ago (or at most this long).
LAUNCH_LOOKUP_SECONDS = 10.0
_IDS_PER_PROTECT = 50  # SetInstanceProtection InstanceIds limit
#: EC2 instance states of an instance that has ended (or is ending).
_ENDED_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
#: EC2's documented ``StateReason`` codes for an instance taken back by Spot ("Server.
#: SpotInstanceShutdown": a Spot instance whose interruption behaviour is to stop).
_SPOT_REASONS = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
ACTIVITIES_PER_POOL = 20  # DescribeScalingActivities MaxRecords: one page, newest first
_MESSAGE_CHARS = 500  # an activity's StatusMessage kept for logs and alerts

_ACTIVITY_STATUS = {
    "Successful": ActivityStatus.SUCCESSFUL,
    "Failed": ActivityStatus.FAILED,
    "Cancelled": ActivityStatus.CANCELLED,
}  # every other StatusCode (InProgress, WaitingFor..., PreInService, ...) is in progress

_LIFECYCLE = {
    "Pending": InstanceLifecycle.PENDING,
    "Pending:Wait": InstanceLifecycle.PENDING,
    "Pending:Proceed": InstanceLifecycle.PENDING,
    "InService": InstanceLifecycle.IN_SERVICE,
    "Terminating": InstanceLifecycle.TERMINATING,
    "Terminating:Wait": InstanceLifecycle.TERMINATING,
    "Terminating:Proceed": InstanceLifecycle.TERMINATING,
    "Terminated": InstanceLifecycle.TERMINATING,
}  # every Warmed:* state is OTHER: a warm pool's instance is no supply and gets no runner
# credential (DescribeAutoScalingGroups does not list it; were it listed, it would wait)


#: A warm instance's Auto Scaling lifecycle state -> its state (``WARM_INSTANCE_STATES``).
_WARMED = {
    "Warmed:Pending": "pending",
    "Warmed:Pending:Wait": "pending",
    "Warmed:Pending:Proceed": "pending",
    "Warmed:Stopped": "stopped",
    "Warmed:Hibernated": "hibernated",
    "Warmed:Running": "running",
    "Warmed:Terminating": "terminating",
    "Warmed:Terminating:Wait": "terminating",
    "Warmed:Terminating:Proceed": "terminating",
    "Warmed:Terminated": "terminating",
}
_WARM_PAGE = 100  # DescribeWarmPool MaxRecords limit


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


class AwsAsgPool:
    """:class:`autoscaler.ports.RunnerPool` over boto3 autoscaling and ec2 clients."""

    def __init__(
        self,
        config: AwsConfig,
        metrics: Metrics,
        *,
        session: boto3.session.Session | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 15.0,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        session = session if session is not None else boto3.session.Session()
        cfg = boto_config(config, connect_timeout=connect_timeout, read_timeout=read_timeout)
        #: The raw clients, exposed for fault injection in tests and the demo.
        self.autoscaling: Any = session.client(
            "autoscaling", region_name=config.region, endpoint_url=config.endpoint_url, config=cfg
        )
        self.ec2: Any = session.client(
            "ec2", region_name=config.region, endpoint_url=config.endpoint_url, config=cfg
        )
        self.metrics = metrics
        self.wall_clock = wall_clock
        self._max_size: dict[str, int] = {}
        self._min_size: dict[str, int] = {}
        self._skew: float | None = None
        #: Launch time per instance id: it never changes, so each instance costs one
        #: DescribeInstances lookup in its life, not one a tick (at 200 instances the
        #: per-tick lookup was most of a webhook-woken tick's time).
        self._launched: dict[str, datetime] = {}
        self._monotonic = monotonic
        self._looked_up_at: float | None = None

    def clock_skew(self) -> float | None:
        """AWS's clock minus ours, in seconds, from the last answer with a ``Date``."""
        return self._skew

    def _measure(self, response: Mapping[str, Any]) -> None:
        """Read AWS's clock from an answer's ``Date`` header (one-second resolution)."""
        meta = response.get("ResponseMetadata")
        headers = meta.get("HTTPHeaders") if isinstance(meta, Mapping) else None
        date = headers.get("date") if isinstance(headers, Mapping) else None
        if not isinstance(date, str):
            return
        try:
            peer = parsedate_to_datetime(date)
        except (TypeError, ValueError):
            return
        if peer.tzinfo is None:
            return
        self._skew = peer.timestamp() - self.wall_clock()
        self.metrics.clock_skew.labels("aws").set(self._skew)

    def _call(self, operation: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """One AWS call (:func:`aws_call`), AWS's clock read from every answer."""
        return aws_call(self.metrics, operation, fn, answered=self._measure, **kwargs)

    def describe(self, names: Sequence[str]) -> dict[str, PoolState]:
        groups: list[dict[str, Any]] = []
        wanted = list(dict.fromkeys(names))
        for i in range(0, len(wanted), _GROUPS_PER_PAGE):
            kwargs: dict[str, Any] = {
                "AutoScalingGroupNames": wanted[i : i + _GROUPS_PER_PAGE],
                "MaxRecords": _GROUPS_PER_PAGE,
            }
            while True:
                page = self._call(
                    "DescribeAutoScalingGroups",
                    self.autoscaling.describe_auto_scaling_groups,
                    **kwargs,
                )
                groups.extend(page.get("AutoScalingGroups", []))
                token = page.get("NextToken")
                if not token:
                    break
                kwargs["NextToken"] = token
        ids = [i["InstanceId"] for g in groups for i in g.get("Instances", [])]
        known = self._launched
        launched = {i: known[i] for i in ids if i in known}
        unknown = [i for i in ids if i not in known]
        now = self._monotonic()
        due = self._looked_up_at is None or now - self._looked_up_at >= LAUNCH_LOOKUP_SECONDS
        if unknown and due:
            launched.update(self._launch_times(unknown))
            self._looked_up_at = now
        if set(wanted) >= set(self._max_size):  # every pool described: forget the gone
            self._launched = launched
        else:
            self._launched.update(launched)
        out: dict[str, PoolState] = {}
        for g in groups:
            name = g["AutoScalingGroupName"]
            instances = tuple(
                Instance(
                    id=i["InstanceId"],
                    pool=name,
                    lifecycle=_LIFECYCLE.get(i.get("LifecycleState", ""), InstanceLifecycle.OTHER),
                    launched_at=launched.get(i["InstanceId"]),
                    protected_from_scale_in=bool(i.get("ProtectedFromScaleIn", False)),
                )
                for i in g.get("Instances", [])
            )
            state = PoolState(
                name=name,
                min_size=int(g["MinSize"]),
                max_size=int(g["MaxSize"]),
                desired_capacity=int(g["DesiredCapacity"]),
                instances=instances,
            )
            if state.desired_capacity > state.live_instances:
                state = replace(state, activities=self._activities(name))
            self._min_size[name], self._max_size[name] = state.min_size, state.max_size
            out[name] = state
        return out

    def _activities(self, pool: str) -> tuple[ScalingActivity, ...]:
        """The group's most recent scaling activities: one page, never paginated."""
        page = self._call(
            "DescribeScalingActivities",
            self.autoscaling.describe_scaling_activities,
            AutoScalingGroupName=pool,
            MaxRecords=ACTIVITIES_PER_POOL,
        )
        out = []
        for a in page.get("Activities", []):
            at = a.get("StartTime")
            if not isinstance(at, datetime):
                continue
            status = _ACTIVITY_STATUS.get(str(a.get("StatusCode", "")), ActivityStatus.IN_PROGRESS)
            message = " ".join(str(a.get("StatusMessage") or "").split())[:_MESSAGE_CHARS]
            code, kind = classify_activity(message) if status is ActivityStatus.FAILED else ("", "")
            out.append(
                ScalingActivity(
                    _utc(at), status, message, code, permanent=bool(kind) and kind != CAPACITY
                )
            )
        return tuple(out)

    def _instances(self, ids: Sequence[str]) -> Iterator[Mapping[str, Any]]:
        """``DescribeInstances`` of ``ids``: every instance EC2 lists, all pages. Filtered
        by ``instance-id`` (not ``InstanceIds``), so an unknown id is no error."""
        for i in range(0, len(ids), _IDS_PER_FILTER):
            kwargs: dict[str, Any] = {
                "Filters": [{"Name": "instance-id", "Values": list(ids[i : i + _IDS_PER_FILTER])}]
            }
            while True:
                page = self._call("DescribeInstances", self.ec2.describe_instances, **kwargs)
                for reservation in page.get("Reservations", []):
                    yield from reservation.get("Instances", [])
                token = page.get("NextToken")
                if not token:
                    break
                kwargs["NextToken"] = token

    def _launch_times(self, ids: Sequence[str]) -> dict[str, datetime]:
        out: dict[str, datetime] = {}
        for inst in self._instances(ids):
            at = inst.get("LaunchTime")
            if isinstance(at, datetime):
                out[inst["InstanceId"]] = _utc(at)
        return out

    def instance_ends(self, instance_ids: Sequence[str]) -> dict[str, InstanceEnd]:
        """The instances of ``instance_ids`` that have ended, with whether Spot ended them
        (EC2's ``StateReason.Code``, a documented code: compared here, at the edge, and
        nowhere else). A running instance, or one EC2 no longer lists, is absent."""
        out: dict[str, InstanceEnd] = {}
        for inst in self._instances(list(dict.fromkeys(instance_ids))):
            end = _instance_end(inst)
            if end is not None:
                out[end.instance_id] = end
        return out

    def set_desired_capacity(self, pool: str, desired: int) -> None:
        # moto accepts a desired capacity above MaxSize; real AWS rejects it. Clamp to the
        # bounds last described (the policy clamps too; this is the last line).
        if pool in self._max_size:
            desired = max(self._min_size[pool], min(desired, self._max_size[pool]))
        self._call(
            "SetDesiredCapacity",
            self.autoscaling.set_desired_capacity,
            AutoScalingGroupName=pool,
            DesiredCapacity=desired,
            HonorCooldown=False,
        )

    def protect_instances(self, pool: str, instance_ids: Sequence[str]) -> None:
        """Protect ``InService`` instances only: AWS answers ValidationError for a call that
        names a ``Pending`` one, failing the whole call (the policy asks for InService)."""
        ids = list(instance_ids)
        for i in range(0, len(ids), _IDS_PER_PROTECT):
            self._call(
                "SetInstanceProtection",
                self.autoscaling.set_instance_protection,
                AutoScalingGroupName=pool,
                InstanceIds=ids[i : i + _IDS_PER_PROTECT],
                ProtectedFromScaleIn=True,
            )

    def describe_warm_pool(self, pool: str) -> WarmPoolState | None:
        """The group's warm pool, or None when it has none (or AWS is deleting it)."""
        kwargs: dict[str, Any] = {"AutoScalingGroupName": pool, "MaxRecords": _WARM_PAGE}
        config: Mapping[str, Any] | None = None
        states: list[str] = []
        ids: list[str] = []
        while True:
            page = self._call("DescribeWarmPool", self.autoscaling.describe_warm_pool, **kwargs)
            config = page.get("WarmPoolConfiguration") or config
            for i in page.get("Instances", []):
                states.append(_WARMED.get(str(i.get("LifecycleState", "")), "other"))
                ids.append(str(i.get("InstanceId", "")))
            token = page.get("NextToken")
            if not token:
                break
            kwargs["NextToken"] = token
        if not config or config.get("Status") == "PendingDelete":
            return None
        prepared = config.get("MaxGroupPreparedCapacity")
        reuse = config.get("InstanceReusePolicy") or {}
        spec = WarmPoolSpec(
            state=str(config.get("PoolState") or "Stopped").lower(),
            min_size=int(config.get("MinSize") or 0),
            max_prepared=None if prepared is None or int(prepared) < 0 else int(prepared),
            reuse=_true(reuse.get("ReuseOnScaleIn")),
        )
        return WarmPoolState(pool, spec, tuple(states), tuple(ids))

    def put_warm_pool(self, pool: str, spec: WarmPoolSpec) -> None:
        """Create or change the group's warm pool. ``ReuseOnScaleIn`` is always sent: an
        instance scaled in is terminated unless the configuration asks for reuse."""
        kwargs: dict[str, Any] = {
            "AutoScalingGroupName": pool,
            "PoolState": spec.state.capitalize(),
            "MinSize": spec.min_size,
            "InstanceReusePolicy": {"ReuseOnScaleIn": spec.reuse},
        }
        # -1: "the group's MaxSize", AWS's way to undo a value set before.
        kwargs["MaxGroupPreparedCapacity"] = -1 if spec.max_prepared is None else spec.max_prepared
        self._call("PutWarmPool", self.autoscaling.put_warm_pool, **kwargs)

    def delete_warm_pool(self, pool: str) -> None:
        """Remove the group's warm pool; AWS terminates its instances."""
        self._call("DeleteWarmPool", self.autoscaling.delete_warm_pool, AutoScalingGroupName=pool)

    def terminate_instance(self, pool: str, instance_id: str) -> None:
        self._call(
            "TerminateInstanceInAutoScalingGroup",
            self.autoscaling.terminate_instance_in_auto_scaling_group,
            InstanceId=instance_id,
            ShouldDecrementDesiredCapacity=True,
        )


def _true(value: Any) -> bool:
    """A boolean of an answer (botocore parses it; an emulator may answer text)."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _instance_end(inst: Mapping[str, Any]) -> InstanceEnd | None:
    """One ``DescribeInstances`` instance -> :class:`InstanceEnd`, or None while it runs
    (or when the answer lacks what is needed: no evidence either way)."""
    iid = inst.get("InstanceId")
    state = inst.get("State")
    name = state.get("Name") if isinstance(state, Mapping) else None
    if not isinstance(iid, str) or name not in _ENDED_STATES:
        return None
    reason = inst.get("StateReason")
    code = reason.get("Code") if isinstance(reason, Mapping) else None
    code = code if isinstance(code, str) else ""
    return InstanceEnd(iid, spot=code in _SPOT_REASONS, code=code)
