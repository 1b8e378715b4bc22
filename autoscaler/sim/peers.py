"""Other autoscalers' rules, as they ship, as small pure functions over one runner type.

Each peer's parameters default to what its own code ships, cited by repository, commit,
file and line (read for the facts; no code of theirs is used). Where a peer leaves
something to its platform (which runner a Kubernetes ReplicaSet deletes first, whether
an ASG may pick a busy victim) the benefit of the doubt goes to the peer: no peer ever
terminates a busy runner here, and every peer launches into the first pool of the type
that has capacity (an ideal fleet request). A peer's ``max`` is the fleet's (the
type's ``max`` and its pools' MaxSize), not a shipped example value.

Sources (commit):

- ARC: actions/actions-runner-controller @2ee6b3b (legacy ``summerwind`` controllers and
  the gha-runner-scale-set listener), actions/scaleset @ its listener module;
- TFA: github-aws-runners/terraform-aws-github-runner @4475534;
- Buildkite: buildkite/buildkite-agent-scaler @49c4145 and
  buildkite/elastic-ci-stack-for-aws (``templates/aws-stack.yml``, which deploys it);
- KEDA: kedacore/keda @8b4f083; the Kubernetes HPA: kubernetes/kubernetes
  ``pkg/controller/podautoscaler`` (kube-controller-manager defaults).

A rule gets a :class:`TypeView` and returns a :class:`PeerAction` (and its new memory,
where it keeps one); :mod:`autoscaler.sim.drivers` calls it on the peer's own schedule.
:class:`Knobs` is this project's settings, which :func:`equalized` gives every peer
wherever it has the same knob (``simulate --equal-knobs``): rule against rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class RunnerView:
    instance_id: str
    launched: float
    booting: bool
    """No runner registered yet."""
    busy: bool
    idle_since: float | None
    """When it last turned idle (None while booting or busy)."""
    in_service: bool = True
    """EC2 runs it (the group counts it ``InService``)."""


@dataclass(frozen=True)
class TypeView:
    """One runner type as a peer sees it: its queue and its instances."""

    now: float
    queued: int
    """Jobs waiting for this type."""
    running: int
    """Jobs running on this type's runners."""
    runners: Sequence[RunnerView]
    """Live instances (launching, booting, idle or busy). The simulator passes a sequence
    that knows its length at once and builds its items only when a rule reads them."""
    min_size: int
    max_size: int
    desired: int = -1
    """The groups' desired capacity (-1: the live count)."""

    @property
    def total(self) -> int:
        return len(self.runners)

    @property
    def busy(self) -> int:
        return sum(1 for r in self.runners if r.busy)

    @property
    def registered(self) -> int:
        return sum(1 for r in self.runners if not r.booting)

    @property
    def in_service(self) -> int:
        return sum(1 for r in self.runners if r.in_service)

    @property
    def asg_desired(self) -> int:
        return self.total if self.desired < 0 else self.desired


@dataclass(frozen=True)
class PeerAction:
    launch: int = 0
    """Raise the groups' desired capacity by this much."""
    terminate: tuple[str, ...] = ()


@dataclass(frozen=True)
class Knobs:
    """This project's settings for one runner type, as a peer with the same knob gets
    them under ``--equal-knobs``."""

    poll_interval: float
    reaction: float | None
    """Seconds from a queued job to a decision (webhooks); None: polling alone."""
    idle_timeout: float
    min_idle: int


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
    """Raise the desired capacity to ``desired`` (clamped to [min, max]), or delete
    non-busy instances down to it. Instances the groups still owe count as coming."""
    desired = max(view.min_size, min(view.max_size, desired))
    if desired > view.asg_desired:
        return PeerAction(launch=desired - view.asg_desired)
    return PeerAction(terminate=shrink(view, view.total - desired))


# --- terraform-aws-github-runner (TFA): one runner per queued event


@dataclass(frozen=True)
class PerEventParams:
    """terraform-aws-github-runner's defaults."""

    ephemeral: bool = False
    """``enable_ephemeral_runners`` defaults to false (``variables.tf:741``): persistent
    runners that take job after job. True: one job per runner, its instance then ends."""
    delay_webhook_event: float = 30.0
    """``delay_webhook_event`` (``variables.tf:649``): the SQS delay before the scale-up
    lambda sees a queued event (``main.tf:71``)."""
    requeue_after: float = 30.0
    """The build queue's visibility timeout is ``runners_scale_up_lambda_timeout``, 30 s
    (``main.tf:72``, ``variables.tf:195``): a message handed back is seen again then."""
    scale_down_interval: float = 300.0
    """``scale_down_schedule_expression`` ``cron(*/5 * * * ? *)`` (``variables.tf:91``)."""
    minimum_running_time: float = 300.0
    """``minimum_running_time_in_minutes``: 5 for Linux (``modules/runners/scale-down.tf:7``),
    counted from the instance's launch (``scale-down.ts:137``)."""
    pool_size: int = 0
    """``pool_config`` is empty by default (``variables.tf:862``): no warm pool."""

    @property
    def job_queued_check(self) -> bool:
        """``enable_job_queued_check`` defaults to "not ephemeral"
        (``modules/runners/main.tf:57``)."""
        return not self.ephemeral


def per_event_scale_up(view: TypeView, p: PerEventParams, still_queued: bool) -> tuple[int, bool]:
    """One ``workflow_job`` ``queued`` message reaching the scale-up lambda: (instances to
    launch, hand the message back to SQS).

    ``scale-up.ts``: with the job-queued check on (persistent runners) a job no longer
    queued creates nothing (line 244); else one runner, unless ``runners_maximum_count``
    is reached (line 278). At the maximum an ephemeral message is handed back for retry
    (line 291); a persistent one is dropped. TFA creates its instances at once, so the
    instances the groups still owe after a throttled activity count as created.
    """
    if p.job_queued_check and not still_queued:
        return 0, False
    if view.asg_desired < view.max_size:
        return 1, False
    return 0, p.ephemeral


def per_event_scale_down(view: TypeView, p: PerEventParams) -> PeerAction:
    """The scale-down lambda, every ``scale_down_interval``: runners that are not busy and
    were launched at least ``minimum_running_time`` ago are deregistered and terminated
    (``scale-down.ts:135-139``), keeping ``pool_size`` idle."""
    old = [
        r.instance_id
        for r in view.runners
        if not r.booting and not r.busy and view.now - r.launched >= p.minimum_running_time
    ]
    keep = max(0, p.pool_size)
    return PeerAction(terminate=tuple(old[keep:]))


def per_event_pool(view: TypeView, p: PerEventParams) -> PeerAction:
    """The pool lambda (``pool_config``): tops the idle runners up to ``pool_size``."""
    idle = sum(1 for r in view.runners if not r.busy)
    room = view.max_size - view.total
    return PeerAction(launch=max(0, min(p.pool_size - idle, room)))


# --- percent-busy: actions-runner-controller's legacy PercentageRunnersBusy


@dataclass(frozen=True)
class PercentBusyParams:
    """ARC's legacy HorizontalRunnerAutoscaler, its code defaults."""

    scale_up_threshold: float = 0.8
    scale_down_threshold: float = 0.3
    scale_up_factor: float = 1.3
    scale_down_factor: float = 0.7
    """``controllers/actions.summerwind.net/autoscaling.go:20-23`` (the docs' example uses
    0.75/0.25/2/0.5; those are not the defaults)."""
    sync_period: float = 60.0
    """``--sync-period`` default 1m (``main.go:153``)."""
    scale_down_delay: float = 600.0
    """``DefaultScaleDownDelay`` 10 min (``horizontalrunnerautoscaler_controller.go:44``):
    no scale down within it of a scale up."""
    min_replicas: int = 1
    """``defaultReplicas`` 1 (``horizontalrunnerautoscaler_controller.go:58``); with 0
    replicas the busy fraction is undefined and nothing would ever scale up."""


@dataclass(frozen=True)
class PercentBusyMemory:
    desired: int
    """The RunnerDeployment's replicas."""
    scaled_up_at: float = -math.inf


def percent_busy(
    view: TypeView, p: PercentBusyParams, memory: PercentBusyMemory
) -> tuple[PeerAction, PercentBusyMemory]:
    """``suggestReplicasByPercentageRunnersBusy`` every ``sync_period``.

    fraction = busy runners / desired replicas (``autoscaling.go:380``); at or above the
    up threshold desired = ceil(desired x up factor); below the down threshold desired =
    int(desired x down factor) (line 391); clamped to [minReplicas, maxReplicas]; a scale
    down waits ``scale_down_delay`` after a scale up. Only non-busy runners are deleted.
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


# --- scale-set: actions-runner-controller's gha-runner-scale-set (the supported mode)


@dataclass(frozen=True)
class ScaleSetParams:
    """gha-runner-scale-set: a listener per scale set and ephemeral runners."""

    min_runners: int = 0
    """``minRunners`` unset: 0 (``controllers/actions.github.com/resourcebuilder.go:124``;
    the chart leaves it commented out, ``charts/gha-runner-scale-set/values.yaml:65``)."""
    message_delay: float = 1.0
    """The listener keeps a long poll open for the scale set's messages
    (actions/scaleset ``listener/listener.go:180``) and GitHub answers it when it
    assigns a job or one completes: taken as one second."""


def scale_set(view: TypeView, p: ScaleSetParams) -> PeerAction:
    """Every message: target = min(minRunners + assigned jobs, maxRunners)
    (``cmd/ghalistener/scaler/scaler.go:237``; the message's ``TotalAssignedJobs``,
    scaleset ``listener.go:233``), jobs queued for the set or running on it. The
    EphemeralRunnerSet creates or deletes (idle) runners to match; each runner takes one
    job and its machine ends with it."""
    return toward(view, min(p.min_runners + view.queued + view.running, view.max_size))


# --- jobs-per-agent: Buildkite's agent scaler, as the Elastic CI Stack deploys it


@dataclass(frozen=True)
class JobsPerAgentParams:
    """buildkite-agent-scaler's defaults, as the Elastic CI Stack for AWS sets them."""

    interval: float = 10.0
    """``LAMBDA_INTERVAL`` 10 s (scaler ``lambda/main.go:51``; the stack's
    ``ScalerMinPollInterval``, ``aws-stack.yml:708``)."""
    agents_per_instance: int = 1
    """One runner per instance here."""
    instance_buffer: int = 0
    """``InstanceBuffer`` 0 (``aws-stack.yml:689``; ``lambda/main.go:80``)."""
    scale_in_idle_period: float = 600.0
    """``ScaleInIdlePeriod`` 600 s (``aws-stack.yml:756``): an instance whose agents were
    idle this long terminates itself and decrements the desired count; the scaler never
    scales in (``DisableScaleIn`` true, ``aws-stack.yml:288``)."""
    scale_out_cooldown: float = 300.0
    """``ScaleOutCooldownPeriod`` 300 s (``aws-stack.yml:343``, and the scaler's own
    ``template.yaml:88``): no scale out within it of the last one
    (``scaler/scaler.go:593``). The scaler binary alone defaults to 0
    (``lambda/main.go:76``): the ``-no-cooldown`` variant."""
    availability_threshold: float = 0.5
    """``AVAILABILITY_THRESHOLD`` 0.5 (``lambda/main.go:82``): with jobs waiting, fewer
    agents online than half the InService instances and the group converged, the
    scaler asks for one instance more (``scaler/scaling_calculator.go:136``)."""


@dataclass(frozen=True)
class JobsPerAgentMemory:
    scaled_out_at: float = -math.inf


def jobs_per_agent(
    view: TypeView, p: JobsPerAgentParams, memory: JobsPerAgentMemory
) -> tuple[PeerAction, JobsPerAgentMemory]:
    """The scaler's desired count, every ``interval`` (``ScalingCalculator.DesiredCount``).

    desired = ceil((scheduled + running jobs) / ``AGENTS_PER_INSTANCE``)
    (``scaling_calculator.go:100-109``), the availability boost, plus at most
    ``INSTANCE_BUFFER`` while jobs exist, clamped to [MinSize, MaxSize]; scale out to it
    when it exceeds the group's desired count and the cooldown has passed. Scale-in is the
    agents' own (:attr:`JobsPerAgentParams.scale_in_idle_period`, the driver's timer).
    """
    jobs = view.queued + view.running
    desired = math.ceil(jobs / max(1, p.agents_per_instance))
    in_service = view.in_service
    current = view.asg_desired
    if jobs and p.availability_threshold > 0 and in_service > 0:
        expected = p.agents_per_instance * in_service
        converged = in_service == current
        if view.registered / expected < p.availability_threshold and converged:
            desired = max(desired, current + 1)
    if jobs:
        desired += min(p.instance_buffer, math.ceil(jobs / max(1, p.agents_per_instance)))
    desired = max(view.min_size, min(view.max_size, desired))
    if desired <= current or view.now - memory.scaled_out_at < p.scale_out_cooldown:
        return PeerAction(), memory
    return PeerAction(launch=desired - current), JobsPerAgentMemory(view.now)


# --- queue-length: KEDA's github-runner scaler driving a Kubernetes HPA


@dataclass(frozen=True)
class QueueLengthParams:
    """A KEDA ScaledObject with the ``github-runner`` trigger, and the HPA it creates."""

    hpa_sync: float = 15.0
    """kube-controller-manager ``--horizontal-pod-autoscaler-sync-period`` 15 s
    (``pkg/controller/podautoscaler/config/v1alpha1/defaults.go:41``); the metric is read
    from GitHub at each sync (KEDA serves it uncached by default)."""
    tolerance: float = 0.1
    """The HPA leaves replicas alone within 10% of the target (``defaults.go:59``)."""
    stabilization: float = 300.0
    """Scale down to the highest recommendation of the last 5 min (``defaults.go:47``)."""
    scale_up_factor: float = 2.0
    scale_up_minimum: int = 4
    """KEDA sets no ``behavior`` unless asked (keda ``controllers/keda/hpa.go:79``), so
    the HPA's own limit holds: at most max(2 x current, 4) replicas a sync
    (``scaleUpLimitFactor``, ``scaleUpLimitMinimum`` in ``podautoscaler/horizontal.go``)."""
    polling_interval: float = 30.0
    """KEDA's ``pollingInterval`` 30 s (keda ``apis/keda/v1alpha1/withtriggers_types.go:51``):
    how often it activates a scaled-to-zero target."""
    cooldown: float = 300.0
    """KEDA's ``cooldownPeriod`` 300 s (``pkg/scaling/executor/scale_executor.go:37``)
    before it scales an inactive target to zero."""
    target_queue_length: int = 1
    """``targetWorkflowQueueLength`` 1 (``pkg/scalers/github_runner_scaler.go:77``), an
    ``AverageValue`` target (``pkg/scalers/scaler.go:107``)."""


@dataclass(frozen=True)
class QueueLengthMemory:
    recent: tuple[tuple[float, int], ...] = ()
    """(time, recommendation) within the stabilization window."""
    active_at: float = -math.inf
    """When KEDA last saw the metric above zero."""


def hpa_step(
    view: TypeView, p: QueueLengthParams, memory: QueueLengthMemory
) -> tuple[PeerAction, QueueLengthMemory]:
    """The HPA, every ``hpa_sync``, while KEDA has the target active (replicas >= 1).

    The metric counts the jobs ``queued`` or ``in_progress`` whose labels the runner
    carries (``github_runner_scaler.go:903``). Replicas = ceil(metric / target) unless
    within the tolerance of the current count, at most max(2 x current, 4), down only to
    the highest recommendation of the stabilization window, at least 1.
    """
    current = view.asg_desired
    if current == 0:
        return PeerAction(), memory
    metric = view.queued + view.running
    target = max(1, p.target_queue_length)
    recommendation = current
    if abs(1.0 - metric / (target * current)) > p.tolerance:
        recommendation = math.ceil(metric / target)
    kept = tuple((t, r) for t, r in memory.recent if view.now - t < p.stabilization)
    recent = (*kept, (view.now, recommendation))
    desired = recommendation
    if recommendation < current:
        desired = min(current, max(r for _, r in recent))
    limit = max(int(p.scale_up_factor * current), p.scale_up_minimum)
    desired = max(1, min(desired, limit))
    return toward(view, desired), replace(memory, recent=recent)


def keda_step(
    view: TypeView, p: QueueLengthParams, memory: QueueLengthMemory
) -> tuple[PeerAction, QueueLengthMemory]:
    """KEDA itself, every ``pollingInterval``: activate a target at zero replicas when the
    metric is above zero (to one replica, where the HPA takes over); scale it to zero
    ``cooldownPeriod`` after the metric was last above zero."""
    active = view.queued + view.running > 0
    if active:
        memory = replace(memory, active_at=view.now)
        if view.asg_desired == 0:
            return toward(view, 1), memory
        return PeerAction(), memory
    if view.asg_desired > 0 and view.now - memory.active_at >= p.cooldown:
        return toward(view, 0), replace(memory, recent=())
    return PeerAction(), memory


# --- this project's knobs, given to each peer that has the same one


def equalized(params: object, knobs: Knobs) -> object:
    """``params`` with this project's poll interval (or reaction), idle timeout and
    min_idle wherever the peer has such a knob; the rest of its rule as it ships."""
    if isinstance(params, PerEventParams):
        return replace(
            params,
            delay_webhook_event=(
                params.delay_webhook_event if knobs.reaction is None else knobs.reaction
            ),
            scale_down_interval=knobs.poll_interval,
            minimum_running_time=knobs.idle_timeout,
            pool_size=knobs.min_idle,
        )
    if isinstance(params, PercentBusyParams):
        return replace(
            params,
            sync_period=knobs.poll_interval,
            scale_down_delay=knobs.idle_timeout,
            min_replicas=max(1, knobs.min_idle),
        )
    if isinstance(params, ScaleSetParams):
        return replace(
            params,
            min_runners=knobs.min_idle,
            message_delay=params.message_delay if knobs.reaction is None else knobs.reaction,
        )
    if isinstance(params, JobsPerAgentParams):
        poll = knobs.poll_interval if knobs.reaction is None else knobs.reaction
        return replace(
            params,
            interval=poll,
            scale_in_idle_period=knobs.idle_timeout,
            instance_buffer=knobs.min_idle,
        )
    if isinstance(params, QueueLengthParams):
        poll = knobs.poll_interval if knobs.reaction is None else knobs.reaction
        return replace(
            params,
            hpa_sync=poll,
            polling_interval=poll,
            stabilization=knobs.idle_timeout,
            cooldown=knobs.idle_timeout,
        )
    raise TypeError(f"no knobs for {type(params).__name__}")
