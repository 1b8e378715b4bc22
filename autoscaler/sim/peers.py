"""Other autoscalers' rules, as small pure functions over one runner type's view.

Each is written from the peer's documented rule (and its defaults), cited in its docstring;
no code of theirs is used. Where a peer leaves something to its platform (which runner a
Kubernetes ReplicaSet deletes first, whether an ASG may pick a busy victim), the benefit of
the doubt goes to the peer: no peer ever terminates a busy runner here, and every peer
launches into the first pool of the type that has capacity (an ideal fleet request).

A rule gets a :class:`TypeView` and returns a :class:`PeerAction` (and its new memory,
where it keeps one); :mod:`autoscaler.sim.drivers` calls it on the peer's own schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunnerView:
    instance_id: str
    launched: float
    booting: bool
    busy: bool
    idle_since: float | None
    """When it last turned idle (None while booting or busy)."""


@dataclass(frozen=True)
class TypeView:
    """One runner type as a peer sees it: its queue and its instances."""

    now: float
    queued: int
    """Jobs waiting for this type."""
    running: int
    """Jobs running on this type's runners."""
    runners: tuple[RunnerView, ...]
    """Live instances (booting, idle or busy)."""
    min_size: int
    max_size: int

    @property
    def total(self) -> int:
        return len(self.runners)

    @property
    def busy(self) -> int:
        return sum(1 for r in self.runners if r.busy)


@dataclass(frozen=True)
class PeerAction:
    launch: int = 0
    terminate: tuple[str, ...] = ()


def shrink(view: TypeView, count: int) -> tuple[str, ...]:
    """Up to ``count`` non-busy instances to delete: booting ones first (newest first),
    then idle ones, longest idle first. Kubernetes' ReplicaSet deletes not-ready pods
    before ready ones; runner controllers only delete runners that are not busy."""
    if count <= 0:
        return ()
    booting = sorted((r for r in view.runners if r.booting), key=lambda r: -r.launched)
    idle = sorted(
        (r for r in view.runners if not r.booting and not r.busy),
        key=lambda r: r.idle_since or 0.0,
    )
    return tuple(r.instance_id for r in (booting + idle)[:count])


def toward(view: TypeView, desired: int) -> PeerAction:
    """Launch or delete to reach ``desired`` instances, clamped to [min, max]."""
    desired = max(view.min_size, min(view.max_size, desired))
    if desired > view.total:
        return PeerAction(launch=desired - view.total)
    return PeerAction(terminate=shrink(view, view.total - desired))


# --- ephemeral-per-job: the Terraform AWS GitHub runner module


@dataclass(frozen=True)
class EphemeralParams:
    """github-aws-runners/terraform-aws-github-runner (was philips-labs/...) defaults."""

    delay_webhook_event: float = 30.0
    """``delay_webhook_event``: seconds a queued event stays invisible on the SQS queue
    before the scale-up lambda receives it."""
    scale_down_interval: float = 300.0
    """``scale_down_schedule_expression``: ``cron(*/5 * * * ? *)``."""
    minimum_running_time: float = 300.0
    """``minimum_running_time_in_minutes``: 5 for Linux runners."""
    pool_size: int = 0
    """``pool_config[].size``: warm idle runners the pool lambda tops up (none by default)."""


def ephemeral_scale_up(view: TypeView, p: EphemeralParams) -> PeerAction:
    """One ``workflow_job`` ``queued`` event, ``delay_webhook_event`` after GitHub sent it.

    Rule (module docs, "scale up lambda"): for each event the lambda creates one new EC2
    runner unless ``runners_maximum_count`` is reached; with ephemeral runners
    ``enable_job_queued_check`` is off by default, so it does not first ask whether the
    job is still queued. The ephemeral runner takes one job and its instance terminates.
    """
    return PeerAction(launch=1 if view.total < view.max_size else 0)


def ephemeral_scale_down(view: TypeView, p: EphemeralParams) -> PeerAction:
    """The scale-down lambda, every ``scale_down_interval``.

    Rule (module docs, "scale down lambda"): runners that are not busy and have run at
    least ``minimum_running_time_in_minutes`` are deregistered and terminated. A runner
    created for a job another runner took sits idle until then.
    """
    old = [
        r.instance_id
        for r in view.runners
        if not r.booting and not r.busy and view.now - r.launched >= p.minimum_running_time
    ]
    keep = max(0, p.pool_size)
    return PeerAction(terminate=tuple(old[keep:]))


def ephemeral_pool(view: TypeView, p: EphemeralParams) -> PeerAction:
    """The pool lambda (``pool_config``): counts the idle runners and tops them up to
    ``size``."""
    idle = sum(1 for r in view.runners if not r.busy)
    room = view.max_size - view.total
    return PeerAction(launch=max(0, min(p.pool_size - idle, room)))


# --- percent-busy: actions-runner-controller's PercentageRunnersBusy


@dataclass(frozen=True)
class PercentBusyParams:
    """actions/actions-runner-controller (legacy HorizontalRunnerAutoscaler), docs values."""

    scale_up_threshold: float = 0.75
    scale_down_threshold: float = 0.25
    scale_up_factor: float = 2.0
    scale_down_factor: float = 0.5
    sync_period: float = 60.0
    """The controller's ``--sync-period`` default (1m)."""
    scale_down_delay: float = 600.0
    """``scaleDownDelaySecondsAfterScaleOut`` default: no scale down within 10 minutes of a
    scale up (anti-flapping)."""


@dataclass(frozen=True)
class PercentBusyMemory:
    desired: int
    """The RunnerDeployment's replicas."""
    scaled_up_at: float = -math.inf


def percent_busy(
    view: TypeView, p: PercentBusyParams, memory: PercentBusyMemory
) -> tuple[PeerAction, PercentBusyMemory]:
    """ARC's ``PercentageRunnersBusy`` metric, every ``sync_period``.

    Rule (docs/automatically-scaling-runners.md and ``suggestReplicasByPercentageRunnersBusy``):
    fraction = busy runners / desired replicas; at or above ``scaleUpThreshold`` desired =
    ceil(desired x ``scaleUpFactor``); below ``scaleDownThreshold`` desired =
    floor(desired x ``scaleDownFactor``); then clamped to [minReplicas, maxReplicas]. A
    scale down waits ``scaleDownDelaySecondsAfterScaleOut`` after a scale up. With zero
    replicas the fraction is undefined and nothing changes, so ``minReplicas`` is at least
    1 here. Only runners that are not busy are deleted.
    """
    desired, scaled_up_at = memory.desired, memory.scaled_up_at
    if desired > 0:
        fraction = view.busy / desired
        if fraction >= p.scale_up_threshold:
            desired = math.ceil(desired * p.scale_up_factor)
        elif fraction < p.scale_down_threshold and view.now - scaled_up_at >= p.scale_down_delay:
            desired = int(desired * p.scale_down_factor)
    desired = max(view.min_size, min(view.max_size, desired))
    if desired > memory.desired:
        scaled_up_at = view.now
    return toward(view, desired), PercentBusyMemory(desired, scaled_up_at)


# --- jobs-per-agent: Buildkite's agent scaler (Elastic CI Stack for AWS)


@dataclass(frozen=True)
class JobsPerAgentParams:
    """buildkite/buildkite-agent-scaler defaults, as the Elastic CI Stack deploys it."""

    interval: float = 10.0
    """``LAMBDA_INTERVAL``: the scaler polls the agent metrics every 10 s."""
    agents_per_instance: int = 1
    """``AGENTS_PER_INSTANCE`` (one runner per instance here)."""
    instance_buffer: int = 0
    """``INSTANCE_BUFFER``: spare instances while jobs exist."""
    scale_in_idle_period: float = 600.0
    """``ScaleInIdlePeriod``: an instance whose agents were idle this long terminates
    itself and decrements the desired count (the scaler runs with ``DISABLE_SCALE_IN``)."""


def jobs_per_agent(view: TypeView, p: JobsPerAgentParams) -> PeerAction:
    """The scaler's desired count, every ``interval``, plus idle self-termination.

    Rule (``ScalingCalculator.DesiredCount`` and the README): desired =
    ceil((scheduled + running jobs) / ``AGENTS_PER_INSTANCE``) plus at most
    ``INSTANCE_BUFFER`` while jobs exist, clamped to [MinSize, MaxSize]; the scaler scales
    out to it at once. Scale-in is left to the agents: the template's ``DISABLE_SCALE_IN``
    default is true and an agent idle for ``ScaleInIdlePeriod`` stops and terminates its
    instance.
    """
    jobs = view.queued + view.running
    desired = math.ceil(jobs / max(1, p.agents_per_instance))
    if jobs:
        desired += min(p.instance_buffer, desired)
    desired = max(view.min_size, min(view.max_size, desired))
    idle_out = tuple(
        r.instance_id
        for r in view.runners
        if r.idle_since is not None and view.now - r.idle_since >= p.scale_in_idle_period
    )
    keep_min = max(0, view.total - view.min_size)
    return PeerAction(launch=max(0, desired - view.total), terminate=idle_out[:keep_min])


# --- queue-length: KEDA's github-runner scaler


@dataclass(frozen=True)
class QueueLengthParams:
    """kedacore/keda ``github-runner`` scaler on a ScaledObject, defaults."""

    polling_interval: float = 30.0
    """``pollingInterval`` default (30 s)."""
    target_queue_length: int = 1
    """``targetWorkflowQueueLength`` default: one runner per job."""
    stabilization: float = 300.0
    """The HPA's scale-down stabilization window (300 s) and KEDA's ``cooldownPeriod``
    before scaling to zero (300 s)."""


@dataclass(frozen=True)
class QueueLengthMemory:
    recent: tuple[tuple[float, int], ...] = ()
    """(time, recommendation) within the stabilization window."""


def queue_length(
    view: TypeView, p: QueueLengthParams, memory: QueueLengthMemory
) -> tuple[PeerAction, QueueLengthMemory]:
    """KEDA's metric, every ``pollingInterval``.

    Rule (keda.sh "Github Runner Scaler" and ``GetWorkflowQueueLength``): the metric counts
    the jobs whose status is ``queued`` or ``in_progress`` and whose labels the runner
    carries; the HPA wants ceil(metric / ``targetWorkflowQueueLength``) replicas, scales up
    at once and down to the highest recommendation of the last 300 s; KEDA scales to zero
    ``cooldownPeriod`` after the metric was last active.
    """
    recommendation = math.ceil((view.queued + view.running) / max(1, p.target_queue_length))
    kept = [(t, r) for t, r in memory.recent if view.now - t < p.stabilization]
    recent = (*kept, (view.now, recommendation))
    desired = max(r for _, r in recent)
    return toward(view, desired), QueueLengthMemory(recent)
