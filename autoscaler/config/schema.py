"""The configuration's frozen, typed values: one dataclass per section, a docstring per field.

Durations are float seconds. Built by :mod:`autoscaler.config.load` (validated once, every
problem reported together); read everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.config.alerts import AlertsConfig
from autoscaler.config.jit import DEFAULT_MODE, DEFAULT_RUNNER_GROUP_ID, EPHEMERAL, JitConfig
from autoscaler.config.job_retry import JobRetryConfig
from autoscaler.config.schedule import MinIdle
from autoscaler.config.simulation import SimulationConfig
from autoscaler.domain import RunnerType
from autoscaler.secrets import Secret, SecretUrl

#: The alert state file when the config names none (the image's working directory is its
#: state volume, /var/lib/ci-autoscaler).
DEFAULT_STATE_PATH = "ci-autoscaler-state.db"

#: The longest ``poll_interval`` accepted: a controller that looks less often than hourly
#: no longer autoscales (and readiness would tolerate a picture three hours old).
MAX_POLL_INTERVAL = 3600.0

#: GitHub-hosted runner labels (ubuntu-latest, windows-2022, macos-14, ...).
DEFAULT_HOSTED_LABELS = ("ubuntu-*", "windows-*", "macos-*")


@dataclass(frozen=True)
class GitHubAppConfig:
    app_id: int
    """The GitHub App's id."""
    installation_id: int
    """The installation of the app on the owner (org or user)."""
    private_key: Secret = field(repr=False)
    """The app's PEM private key, read from ``private_key_file`` at load."""


@dataclass(frozen=True)
class GitHubConfig:
    owner: str
    """The org (or user) whose repositories and self-hosted runners are watched."""
    api_url: str = "https://api.github.com"
    """REST API root; GitHub Enterprise Server: ``https://HOST/api/v3``."""
    repos: tuple[str, ...] | None = None
    """Repository names to watch; ``None`` lists every repository of the owner."""
    token: Secret | None = field(default=None, repr=False)
    """A token with Actions read and org self-hosted runner read/write."""
    app: GitHubAppConfig | None = field(default=None, repr=False)
    """GitHub App credentials, instead of a token."""
    timeout: float = 10.0
    """Per-request timeout in seconds (connect, read, write and pool); more than zero."""
    max_concurrency: int = 16
    """Requests in flight at once."""
    hosted_labels: tuple[str, ...] = DEFAULT_HOSTED_LABELS
    """Globs of GitHub-hosted runner labels: an unmatched job asking for one is not ours."""
    rate_limit_share: float = 0.8
    """Share of the primary rate limit (``x-ratelimit-limit`` per hour) the poll may spend;
    the rest is left to other users of the same credentials. Over it, quiet repositories
    are re-listed less often, then busy ones (the "GitHub budget too small" alert)."""
    proxy: SecretUrl | None = field(default=None, repr=False)
    """An HTTP(S) proxy every GitHub request goes through (an egress proxy of the VPC),
    ``http://[user:password@]host:port``; None: straight to ``api_url``. The environment's
    ``HTTPS_PROXY`` is not read: configuration is the one place settings come from."""


@dataclass(frozen=True)
class QueueObjective:
    """A queue-time objective: ``objective`` of the type's jobs start within ``queue_time``."""

    queue_time: float
    """Seconds a job may wait for a runner and still count as good."""
    objective: float
    """The share of jobs that must start within ``queue_time`` (0 < objective < 1)."""

    @property
    def error_budget(self) -> float:
        """The share of jobs allowed to wait longer (1 - objective)."""
        return 1.0 - self.objective


@dataclass(frozen=True)
class RunnerTypeConfig:
    name: str
    """The runner type's name (the key under ``runner_types``)."""
    labels: frozenset[str]
    """Labels every runner of this type carries (lower-cased)."""
    pools: tuple[str, ...] = ()
    """Auto Scaling group names, tried in this order."""
    min_idle: MinIdle = field(default_factory=MinIdle)
    """Warm runners kept idle: a number, or a weekly UTC schedule
    (:mod:`autoscaler.config.schedule`); ask it with ``min_idle.at(now)``."""
    max: int | None = None
    """Never more instances than this across the type's pools (nor the ASG MaxSize)."""
    priority: int = 0
    """Higher gets capacity first under a shared budget."""
    idle_timeout: float = 120.0
    """An idle runner older than this may be scaled in. Two minutes, about one boot: the
    replays of ``make bench`` (README "How good is the scaling?") show 10 minutes costing
    15-35% more runner-hours for a few seconds of p95 queue time."""
    boot_timeout: float = 900.0
    """An instance with no registered runner after this long is an orphan."""
    slo: QueueObjective | None = None
    """Optional queue-time objective (``slo: {queue_time: 5m, objective: 0.95}``): exported
    as metrics and watched by the built-in "Queue-time objective burning" alert."""
    mode: str = DEFAULT_MODE
    """``ephemeral`` (one job per machine, registered just in time by the controller) or
    ``persistent`` (machines register their own runner and run job after job). New configs
    say ``ephemeral``; the default stays ``persistent`` so an existing file keeps its
    meaning (:mod:`autoscaler.config.jit` says why)."""
    runner_group_id: int = DEFAULT_RUNNER_GROUP_ID
    """The GitHub runner group ephemeral runners join (1: Default)."""

    @property
    def runner_type(self) -> RunnerType:
        return RunnerType(self.name, self.labels)

    @property
    def ephemeral(self) -> bool:
        """Its instances run one job each and get a JIT config from the controller."""
        return self.mode == EPHEMERAL


@dataclass(frozen=True)
class BudgetConfig:
    name: str
    """The budget's name (the key under ``budgets``)."""
    max_instances: int
    """Instances the matching runner types may hold together."""
    runner_types: tuple[str, ...]
    """Glob patterns over runner type names."""


@dataclass(frozen=True)
class RetryConfig:
    max_attempts: int = 4
    """Attempts per cloud call, the first included."""
    deadline: float = 30.0
    """No new attempt starts after this many seconds (more than zero)."""
    initial_backoff: float = 0.5
    """Upper bound of the first full-jitter wait, in seconds; doubles each attempt; at
    most ``max_backoff``."""
    max_backoff: float = 8.0
    """Cap on one wait, in seconds."""


@dataclass(frozen=True)
class AwsConfig:
    region: str = "us-east-1"
    """AWS region of the runner pools."""
    endpoint_url: str | None = None
    """Set for moto or another AWS-compatible endpoint."""
    retry: RetryConfig = RetryConfig()
    """Our retry policy around every AWS call."""
    botocore_max_attempts: int = 1
    """botocore's own ``total_max_attempts`` (1: botocore does not retry; we do)."""
    interruption_queue_url: str | None = None
    """The SQS queue EventBridge fills with the managed groups' EC2 Spot interruption
    warnings, rebalance recommendations and state changes (terraform creates it); None:
    interruptions are not watched."""


@dataclass(frozen=True)
class ScalingConfig:
    enabled: bool = True
    """False: observe and alert only, never touch a pool."""
    max_scale_in_per_tick: int = 20
    """Idle runners removed per tick at most (5 left runners idle for half an hour after a
    300-job matrix push in the replays)."""
    max_cleanup_per_tick: int = 5
    """Orphan instances and stale runners cleaned up per tick at most."""
    capacity_backoff_initial: float = 300.0
    """How long a pool out of capacity is skipped at first; doubles each time; at most
    ``capacity_backoff_max``."""
    capacity_backoff_max: float = 1800.0
    """Cap on the capacity back-off."""


#: The state backends: one process on one disk, or a DynamoDB table shared by controllers.
SQLITE, DYNAMODB = "sqlite", "dynamodb"

#: The shortest ``state.lease_duration`` accepted: the lease is renewed every third of it
#: and checked with a fifth of it as the safety margin, and a DynamoDB request must fit.
MIN_LEASE_DURATION = 1.0


@dataclass(frozen=True)
class StateConfig:
    backend: str = SQLITE
    """Where what must survive a restart lives (alert states, the outbox, capacity back-off,
    pending terminations, the GitHub ETag cache): ``sqlite``, one process on one disk, or
    ``dynamodb``, one table several controllers share, with a leader lease."""
    path: str | None = DEFAULT_STATE_PATH
    """``sqlite``: the file, relative to the working directory (the image's is the state
    volume); ``":memory:"`` keeps it in memory, lost on restart."""
    table: str = ""
    """``dynamodb``: the table's name (region and endpoint from ``aws``); create it with
    ``ci-autoscaler state create-table`` or the terraform module."""
    lease_duration: float = 30.0
    """``dynamodb``: how long a leader may act after its last renewal. Renewed every third
    of it; a follower takes over once the lease went unrenewed this long; a leader stops
    acting with a fifth of it still left (the safety margin)."""


@dataclass(frozen=True)
class WebhookConfig:
    """GitHub ``workflow_job`` webhooks: react to a queued job at once, poll to reconcile."""

    secret: Secret = field(repr=False)
    """The webhook's secret: every delivery's ``X-Hub-Signature-256`` is checked with it."""
    listen_host: str = "0.0.0.0"
    listen_port: int = 9465
    """Where ``POST /github/webhook`` is served (a listener of its own, never /metrics)."""
    reconcile_interval: float = 300.0
    """Seconds between reconcile polls while webhooks flow (lean: the jobs of runs the
    index cannot be wrong about are not re-read); when none arrives for longer, the
    controller polls every ``poll_interval`` again (the full poll) until they do."""
    max_body_bytes: int = 1_048_576
    """A delivery larger than this is refused with 413 unread (a ``workflow_job`` payload
    is a few tens of KiB)."""
    queue_size: int = 1000
    """Verified deliveries waiting for the tick; when full the listener answers 503, so
    GitHub marks the delivery failed and the reconcile catches it. Only without a state
    store: ``run`` writes each delivery to the store's job index at once instead (a store
    that cannot take it: 503 likewise)."""
    debounce: float = 0.2
    """Seconds a queued event waits for more before it wakes the tick: a 100-job matrix
    is one scale-up, not 100."""
    hook_id: int | None = None
    """The organization webhook's id (*Settings > Webhooks*, the number in its URL): at
    each reconcile the controller reads the hook's delivery log, redelivers the
    ``workflow_job`` deliveries GitHub failed to make (GitHub never does on its own) and,
    when the log shows none lost since the last reconcile, skips the runs and jobs
    listings it makes only in case one was: a run's jobs are listed when its hour is up
    (the bound on a delivery GitHub never attempted), the runs listings once an hour. Needs
    the token's ``admin:org_hook`` scope (an App: the *Webhooks* organization permission,
    read and write). ``None``: no log read, the lean reconcile alone."""


@dataclass(frozen=True)
class Config:
    github: GitHubConfig
    runner_types: tuple[RunnerTypeConfig, ...]
    poll_interval: float = 30.0
    """Seconds between ticks (more than zero, at most :data:`MAX_POLL_INTERVAL`)."""
    listen_host: str = "0.0.0.0"
    listen_port: int = 9464
    """Where /metrics, /healthz and /readyz are served."""
    log_level: str = "info"
    aws: AwsConfig = AwsConfig()
    budgets: tuple[BudgetConfig, ...] = ()
    scaling: ScalingConfig = ScalingConfig()
    state: StateConfig = StateConfig()
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    webhook: WebhookConfig | None = None
    """GitHub webhooks (``None``: polling alone)."""
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    """Only ``ci-autoscaler simulate`` reads it: the emulated fleet's boot times and
    outages."""
    jit: JitConfig = field(default_factory=JitConfig)
    """Where ephemeral runners' JIT configs are handed over (SSM parameter path)."""
    job_retry: JobRetryConfig = field(default_factory=JobRetryConfig)
    """Re-run jobs lost to infrastructure (off by default: it writes to repositories)."""

    def runner_type(self, name: str) -> RunnerTypeConfig:
        for rt in self.runner_types:
            if rt.name == name:
                return rt
        raise KeyError(name)
