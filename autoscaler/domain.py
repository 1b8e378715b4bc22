"""Plain values the pure core works on. No I/O, no vendor types.

Labels are stored lower-cased: GitHub compares runner labels case-insensitively.
All datetimes are timezone-aware UTC.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime


def normalize_labels(labels: Iterable[str]) -> frozenset[str]:
    """Lower-case and strip a label list, the way GitHub compares labels."""
    return frozenset(label.strip().lower() for label in labels if label.strip())


class JobStatus(enum.Enum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    WAITING = "waiting"


@dataclass(frozen=True, slots=True)
class Job:
    """One workflow job as the CI source reports it."""

    id: int
    run_id: int
    repo: str
    name: str
    labels: frozenset[str]
    status: JobStatus
    created_at: datetime
    started_at: datetime | None = None
    has_steps: bool = False
    run_completed: bool = False
    runner_name: str | None = None


class RunnerState(enum.Enum):
    IDLE = "idle"
    BUSY = "busy"
    OFFLINE = "offline"


@dataclass(frozen=True, slots=True)
class Runner:
    """One self-hosted runner registered with the CI provider."""

    id: int
    name: str
    labels: frozenset[str]
    online: bool
    busy: bool

    @property
    def state(self) -> RunnerState:
        if not self.online:
            return RunnerState.OFFLINE
        return RunnerState.BUSY if self.busy else RunnerState.IDLE


@dataclass(frozen=True, slots=True)
class RunnerType:
    """A named label set; runners of this type carry all of these labels."""

    name: str
    labels: frozenset[str]


@dataclass(frozen=True, slots=True)
class PollBudget:
    """How the CI source spends its API budget (GitHub's primary rate limit) this tick."""

    poll_interval: float
    busy_interval: float
    """Seconds between re-lists of repositories and runs with queued jobs."""
    quiet_interval: float
    """Seconds between re-lists of quiet repositories (polling alone: their newest runs;
    as the webhook reconcile: every unit without queued jobs)."""
    budget_per_hour: float
    """Requests per hour the source may spend (``github.rate_limit_share`` of the limit)."""
    needed_per_hour: float
    """What listing every unit at its own interval, unstretched, would cost."""
    too_small: bool
    """Repositories with queued jobs are re-listed less often than every poll interval."""
    staleness_limit: float | None = None
    """Polling alone: the longest any listing goes without being read again (None: the
    webhook reconcile, which reads what it needs at every reconcile)."""
    live_repos: int = 0
    """Repositories holding a run that is not completed (listed whole every tick)."""
    quiet_repos: int = 0
    """The others (listed by their newest runs every ``quiet_interval``)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What one poll of the CI source saw."""

    observed_at: datetime
    jobs: tuple[Job, ...]
    runners: tuple[Runner, ...]
    #: Items skipped because the provider returned bad data for them.
    skipped_items: int = 0
    #: Of those, runners: a skipped runner looks absent, so its instance must not be
    #: mistaken for an orphan this tick.
    skipped_runners: int = 0
    #: The provider's clock minus ours, in seconds, from the ``Date`` header of its answers
    #: during this poll (None: no answer carried one).
    clock_skew_seconds: float | None = None
    #: The source's API budget, when it plans one.
    budget: PollBudget | None = None
    #: When ``runners`` were read, if before ``observed_at`` (None: the same poll). A
    #: webhook tick answers jobs from its index at once but keeps the last poll's runner
    #: list: a runner registered since is missing from it, not gone.
    runners_observed_at: datetime | None = None
    #: (repository, why) for each watched repository the source could not list and holds
    #: no earlier listing of: its queued jobs are missing from ``jobs`` (the poll is partial).
    unlisted_repos: tuple[tuple[str, str], ...] = ()

    @property
    def runners_seen_at(self) -> datetime:
        """When the runner list was read: what a judgement on a runner's absence needs."""
        return self.observed_at if self.runners_observed_at is None else self.runners_observed_at


@dataclass(frozen=True, slots=True)
class RunnerCounts:
    idle: int = 0
    busy: int = 0
    offline: int = 0


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Per runner type: the demand waiting and the runners serving it."""

    runner_type: str
    queue_size: int
    max_queue_time_seconds: float
    runners: RunnerCounts
    #: Jobs still marked queued that GitHub will never run (have steps / run completed).
    ghost_jobs: int = 0
    #: created_at of the oldest fresh queued job, for budget tie-breaks.
    oldest_queued_at: datetime | None = None
    #: Queue time in seconds of every fresh queued job, oldest first (for min_job_age).
    queued_ages_seconds: tuple[float, ...] = ()
    #: Seconds since creation of every job of the type in progress, when the source
    #: lists them (the arrival rate counts the jobs created since the last poll).
    started_ages_seconds: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """The queue per runner type at one instant."""

    observed_at: datetime
    per_type: Mapping[str, QueueStats]
    unmatched_jobs: int
    ghost_jobs: int
    #: Queue time in seconds of every unmatched job (nothing will ever run them).
    unmatched_ages_seconds: tuple[float, ...] = field(default=())
    #: Queued jobs no type covers that ask for GitHub-hosted runners (not ours).
    hosted_jobs: int = 0


class InstanceLifecycle(enum.Enum):
    PENDING = "pending"
    IN_SERVICE = "in_service"
    TERMINATING = "terminating"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Instance:
    """One cloud instance in a runner pool."""

    id: str
    pool: str
    lifecycle: InstanceLifecycle
    launched_at: datetime | None
    protected_from_scale_in: bool = True


class ActivityStatus(enum.Enum):
    """How a pool's scaling activity (an instance launch or termination) ended, or not yet.

    EC2 Auto Scaling reports a launch it could not make (no capacity, spot capacity) this
    way, after SetDesiredCapacity itself succeeded.
    """

    IN_PROGRESS = "in_progress"
    SUCCESSFUL = "successful"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class ScalingActivity:
    """One recent scaling activity of a pool.

    ``status`` is an enum. Why a launch failed is classified by the adapter at the edge
    (a table of the cloud's error codes found in the message, never free-form English):
    ``code`` is the code it found and ``permanent`` says whether a person must act
    (quota, image, launch template, permissions) or capacity may come back by itself.
    ``message`` is the cloud's own text, kept for people (logs, alerts), never parsed here.
    """

    started_at: datetime
    status: ActivityStatus
    message: str = ""
    code: str = ""
    permanent: bool = False


@dataclass(frozen=True, slots=True)
class PoolState:
    """A cloud runner pool (an EC2 Auto Scaling group) as last described."""

    name: str
    min_size: int
    max_size: int
    desired_capacity: int
    instances: tuple[Instance, ...]
    #: Recent scaling activities, newest first. Adapters fill it only for a pool whose
    #: desired capacity exceeds its live instances (the only time a failed launch matters).
    activities: tuple[ScalingActivity, ...] = ()

    @property
    def live_instances(self) -> int:
        """Instances in service or booting: supply that already exists or is on its way."""
        return sum(
            1
            for i in self.instances
            if i.lifecycle in (InstanceLifecycle.PENDING, InstanceLifecycle.IN_SERVICE)
        )


#: A warm instance's state, from its Auto Scaling lifecycle state (``Warmed:Stopped``):
#: on its way in, held stopped, hibernated or running, or on its way out.
WARM_INSTANCE_STATES = ("pending", "stopped", "hibernated", "running", "terminating", "other")


@dataclass(frozen=True, slots=True)
class WarmPoolSpec:
    """A group's warm pool settings: what the configuration asks, or what AWS has."""

    #: ``stopped``, ``hibernated`` or ``running`` (the configuration's spelling).
    state: str
    min_size: int
    #: The group's and warm pool's instances together at most (None: the group's MaxSize).
    max_prepared: int | None
    #: An instance the group scales in goes back to the warm pool.
    reuse: bool

    def __str__(self) -> str:
        """``stopped, min 2, max prepared 8`` (reasons, ``explain``, the page)."""
        prepared = "MaxSize" if self.max_prepared is None else str(self.max_prepared)
        reuse = ", reused on scale-in" if self.reuse else ""
        return f"{self.state}, min {self.min_size}, max prepared {prepared}{reuse}"


@dataclass(frozen=True, slots=True)
class WarmPoolState:
    """A group's warm pool as last described: its settings and its instances' states."""

    pool: str
    spec: WarmPoolSpec
    #: One entry per warm instance, its state (one of :data:`WARM_INSTANCE_STATES`).
    instances: tuple[str, ...] = ()
    #: The warm instances' ids, in the order of :attr:`instances`: they are the pool's
    #: (not orphans, not idle runners), whatever their state.
    instance_ids: tuple[str, ...] = ()

    def count(self, state: str) -> int:
        return sum(1 for s in self.instances if s == state)


@dataclass(frozen=True, slots=True)
class ScalingProblem:
    """Something scaling hit that on-call must hear about at once.

    ``kind``: ``permanent`` (a permanent cloud error, ``code`` names it),
    ``launch`` (the pool accepted a scale-up and the cloud could not launch for a reason a
    person must fix: ``code`` is the cloud's code, ``message`` its own words),
    ``out_of_capacity`` (every pool of the type is out), ``missing`` (a configured pool
    does not exist).
    """

    kind: str
    runner_type: str
    pool: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Cause:
    """One reason jobs of a runner type wait, as on-call reads it.

    ``code`` is stable (``at_max``, ``capacity_backoff``, ... :mod:`autoscaler.scale.diagnosis`
    lists them): alerts, ``explain`` and dashboards may key on it. ``detail`` is one line for
    a person, naming the numbers (pools, counts, ages, the cloud's own message).
    """

    code: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class ClockSkew:
    """How far the peers' clocks are from ours: peer minus ours, in seconds (positive: the
    peer is ahead). None where no answer of that peer carried a ``Date`` header yet."""

    github: float | None = None
    aws: float | None = None

    @property
    def worst(self) -> float:
        """The largest absolute skew measured (0 when nothing was measured)."""
        return max((abs(s) for s in (self.github, self.aws) if s is not None), default=0.0)


@dataclass(frozen=True)
class JobStart:
    """One job seen started for the first time."""

    runner_type: str
    queue_seconds: float
    within_objective: bool | None = None
    """Started within the type's ``slo.queue_time``; None when the type has no slo."""
    created_at: datetime | None = None
    started_at: datetime | None = None
    first_seen: datetime | None = None
    """When we first saw it queued (a poll or a webhook); None: first seen started."""
    runner_name: str | None = None
    """The runner that took it (GitHub's ``runner_name``), when GitHub said."""
    repository: str = ""
    """``owner/name`` of the job's repository."""
    job_id: int | None = None
    """GitHub's id of the job."""


#: The stages of a job's wait, in the order it goes through them
#: (:mod:`autoscaler.observe.waits`).
STAGES = ("github_lag", "decision", "launch", "boot", "assignment")


@dataclass(frozen=True)
class JobWait:
    """One started job's wait, by stage (seconds, in :data:`STAGES` order)."""

    runner_type: str
    stages: tuple[float, ...]
    started_at: datetime | None = None
    """When the job started: the windows of the stage regression alert count from it."""
    created_at: datetime | None = None
    pool: str = ""
    """The pool whose instance ran it."""
    repository: str = ""
    job_id: int | None = None

    @property
    def total(self) -> float:
        return sum(self.stages)

    def by_stage(self) -> dict[str, float]:
        return dict(zip(STAGES, self.stages, strict=True))


# --- completed jobs, for the job-retry stage
#
# A CompletedJob is shaped after what both of GitHub's views of a job give: an item of
# ``GET /repos/{o}/{r}/actions/runs/{run_id}/jobs`` and the ``workflow_job`` object of a
# ``workflow_job`` ``completed`` webhook (the same fields: ``conclusion``, ``runner_name``,
# ``run_attempt``, ``steps``). Annotations come from a separate call
# (``GET /repos/{o}/{r}/check-runs/{job_id}/annotations``; a job's id is its check run's
# id), so they are optional: ``None`` when they could not be read. A CompletedRun is every
# job of one run attempt once all of them completed: the unit a re-run is decided for
# (``POST .../actions/runs/{run_id}/rerun-failed-jobs`` brings back a whole run attempt).

#: Conclusions of a job that failed (``cancelled`` is a person's, a newer push's, or a
#: failing matrix sibling's doing: ``strategy.fail-fast``).
FAILED_CONCLUSIONS = frozenset({"failure", "timed_out"})
CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Annotation:
    """One check-run annotation (GitHub: ``annotation_level``, ``message``, ``title``)."""

    level: str
    message: str
    title: str = ""


@dataclass(frozen=True, slots=True)
class RunProgress:
    """Where a workflow run is now (``GET /repos/{o}/{r}/actions/runs/{run_id}``): read
    after GitHub answers a re-run with 403, which it does for three different reasons."""

    status: str
    """``completed``, ``in_progress``, ``queued``, ``waiting``..."""
    attempt: int
    """``run_attempt``: above the failed job's, the run was re-run already."""


@dataclass(frozen=True, slots=True)
class CompletedJob:
    """One completed workflow job, as the poll or a webhook saw it."""

    repo: str
    run_id: int
    job_id: int
    name: str
    conclusion: str
    """``success``, ``failure``, ``cancelled``, ``timed_out``, ``skipped``, ``neutral``..."""
    run_attempt: int
    """GitHub counts from 1; a re-run makes attempt 2 of the same run."""
    runner_name: str | None = None
    """None (or empty at GitHub): the job never got a runner, or the runner is unknown."""
    labels: frozenset[str] = frozenset()
    started_at: datetime | None = None
    completed_at: datetime | None = None
    failed_step: bool | None = None
    """A step concluded ``failure``; None: the job reports no steps at all."""
    annotations: tuple[Annotation, ...] | None = None
    """The job's annotations; None: not read (no call made, or an unreadable answer)."""

    @property
    def failed(self) -> bool:
        return self.conclusion in FAILED_CONCLUSIONS

    @property
    def key(self) -> str:
        """Stable id of this job (one attempt of one job): ``repo#job_id``."""
        return f"{self.repo}#{self.job_id}"


def run_key(repo: str, run_id: int, attempt: int) -> str:
    """Stable id of one run attempt: ``repo#run_id#attempt``."""
    return f"{repo}#{run_id}#{attempt}"


@dataclass(frozen=True, slots=True)
class CompletedRun:
    """One workflow run attempt after every job of it completed.

    ``jobs`` is what ``GET .../runs/{run_id}/jobs?filter=latest`` lists then: the latest
    of each job. A re-run attempt keeps the results of the jobs it did not re-run, so a
    job may carry an earlier ``run_attempt`` than the run's."""

    repo: str
    run_id: int
    attempt: int
    """The run's ``run_attempt`` (GitHub counts from 1)."""
    jobs: tuple[CompletedJob, ...]

    @property
    def key(self) -> str:
        return run_key(self.repo, self.run_id, self.attempt)

    @property
    def of_interest(self) -> bool:
        """A job of it failed or was cancelled: something job retry may judge."""
        return any(j.failed or j.conclusion == CANCELLED for j in self.jobs)


def completed_run(repo: str, run_id: int, jobs: Iterable[CompletedJob]) -> CompletedRun:
    """The run of these jobs (its attempt: the newest any of them belongs to)."""
    listed = tuple(jobs)
    attempt = max((j.run_attempt for j in listed), default=1)
    return CompletedRun(repo, run_id, attempt, listed)
