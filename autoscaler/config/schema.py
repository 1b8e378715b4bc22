"""The configuration's schema: one frozen pydantic model per section, a docstring per key.

The models are the file's format: their keys are the YAML keys (``extra="forbid"``),
their docstrings the descriptions of the JSON Schema (``ci-autoscaler config schema``)
editors and the docs read. Durations are held as float seconds. A file is read by
:mod:`autoscaler.config.load`; everything else reads the frozen values.

The sections with a module of their own: ``alerts``, ``jit``, ``job_retry``, ``pools``,
``simulation``, and ``min_idle`` (:mod:`~autoscaler.config.schedule`).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic.functional_validators import ModelWrapValidatorHandler
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema

from autoscaler.config.alerts import AlertsConfig
from autoscaler.config.durations import format_seconds
from autoscaler.config.jit import DEFAULT_MODE, DEFAULT_RUNNER_GROUP_ID, EPHEMERAL, MODES, JitConfig
from autoscaler.config.job_retry import JobRetryConfig
from autoscaler.config.pools import ON_DEMAND, PoolConfig
from autoscaler.config.schedule import CountOrMinIdle, MinIdle
from autoscaler.config.simulation import SimulationConfig
from autoscaler.config.values import (
    Address,
    ByName,
    Choice,
    Duration,
    FileContext,
    Flag,
    Fraction,
    Integer,
    Key,
    Labels,
    Listen,
    Required,
    SecretText,
    Section,
    Strings,
    Text,
    Url,
    Value,
    Where,
    fail,
    from_file,
    together,
    wrong,
)
from autoscaler.domain import RunnerType
from autoscaler.secrets import Secret, SecretUrl, shown

#: The alert state file when the config names none (the image's working directory is its
#: state volume, /var/lib/ci-autoscaler).
DEFAULT_STATE_PATH = "ci-autoscaler-state.db"

#: The longest ``poll_interval`` accepted: a controller that looks less often than hourly
#: no longer autoscales (and readiness would tolerate a picture three hours old).
MAX_POLL_INTERVAL = 3600.0

#: GitHub-hosted runner labels (ubuntu-latest, windows-2022, macos-14, ...).
DEFAULT_HOSTED_LABELS = ("ubuntu-*", "windows-*", "macos-*")

#: The state backends: one process on one disk, or a DynamoDB table shared by controllers.
SQLITE, DYNAMODB = "sqlite", "dynamodb"

#: The shortest ``state.lease_duration`` accepted: the lease is renewed every third of it
#: and checked with a fifth of it as the safety margin, and a DynamoDB request must fit.
MIN_LEASE_DURATION = 1.0

MIN_BOOT_TIMEOUT = 10.0
"""The shortest ``boot_timeout`` accepted, in seconds. No EC2 instance boots and registers
a runner faster; below it every new instance would be judged an orphan (``0s`` made each
one a candidate the moment it launched). The orphan check's clock-skew guard, a quarter of
``boot_timeout``, must also stay above the one-second resolution of the ``Date`` headers
and launch times it compares."""

#: DynamoDB's table-name rule.
_TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")


class KeyFile(Value):
    """A PEM file's path (relative to the config file), read at load into a :class:`Secret`."""

    def check(self, value: Any, info: ValidationInfo) -> Secret:
        if isinstance(value, Secret):
            return value
        if not isinstance(value, str) or not value.strip():
            raise wrong("must be a non-empty string")
        base = info.context.base_dir if isinstance(info.context, FileContext) else Path.cwd()
        try:
            return Secret((base / value).read_text(encoding="utf-8"))
        except OSError as exc:
            raise wrong(f"cannot read: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise wrong("is not UTF-8 text (a PEM key is ASCII)") from None

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "string", "minLength": 1}


class GitHubAppConfig(Section):
    """A GitHub App's credentials, instead of a token (a higher rate limit)."""

    app_id: Annotated[int, Integer(1)]
    """The GitHub App's id."""
    installation_id: Annotated[int, Integer(1)]
    """The installation of the app on the owner (org or user)."""
    private_key: Annotated[Secret, KeyFile()] = Field(alias="private_key_file", repr=False)
    """The app's PEM private key file, relative to the config file or absolute; read at
    load."""


class GitHubConfig(Section):
    """How the controller reaches GitHub: the API, the owner, one credential."""

    owner: Annotated[str, Text()]
    """The org (or user) whose repositories and self-hosted runners are watched."""
    api_url: Annotated[
        str, Text("^https?://", "an http(s) URL"), AfterValidator(lambda url: url.rstrip("/"))
    ] = "https://api.github.com"
    """REST API root; GitHub Enterprise Server: `https://HOST/api/v3`."""
    repos: Annotated[tuple[str, ...], Strings()] | None = None
    """Repository names to watch; absent: every repository of the owner."""
    token: Annotated[Secret, SecretText()] | None = Field(default=None, repr=False)
    """A token with Actions read and org self-hosted runner read/write (or `app`)."""
    app: GitHubAppConfig | None = Field(default=None, repr=False)
    """GitHub App credentials, instead of a token."""
    timeout: Annotated[float, Duration(positive=True)] = 10.0
    """Per-request timeout (connect, read, write and pool)."""
    max_concurrency: Annotated[int, Integer(1)] = 16
    """Requests in flight at once (a fixed pool of workers)."""
    hosted_labels: Annotated[tuple[str, ...], Strings(lower=True)] = DEFAULT_HOSTED_LABELS
    """Globs of GitHub-hosted runner labels: an unmatched job asking for one is not ours."""
    rate_limit_share: Annotated[float, Fraction(up_to_one=True)] = 0.8
    """Share of the primary rate limit (`x-ratelimit-limit` per hour) the poll may spend;
    the rest is left to other users of the same credentials. Over it, quiet repositories
    are re-listed less often, then busy ones (the "GitHub budget too small" alert)."""
    proxy: Annotated[SecretUrl, Url()] | None = Field(default=None, repr=False)
    """An HTTP(S) proxy every GitHub request goes through (an egress proxy of the VPC),
    `http://[user:password@]host:port`; absent: straight to `api_url`. The environment's
    `HTTPS_PROXY` is not read: configuration is the one place settings come from."""

    @model_validator(mode="wrap")
    @classmethod
    def _one_credential(
        cls, value: Any, handler: ModelWrapValidatorHandler[GitHubConfig], info: ValidationInfo
    ) -> GitHubConfig:
        """Exactly one of ``token`` and ``app`` (said whatever else is wrong)."""
        if not from_file(info) or not isinstance(value, dict):
            return handler(value)
        given = [key for key in ("token", "app") if value.get(key) is not None]
        problems: list[tuple[Where, str]] = []
        if not given:
            problems.append(((), "needs either token or app"))
        elif len(given) == 2:
            problems.append(((), "set token or app, not both"))
        return together(value, handler, problems)  # type: ignore[no-any-return]


class QueueObjective(Section):
    """A queue-time objective: `objective` of the type's jobs start within `queue_time`."""

    queue_time: Annotated[float, Duration(positive=True)]
    """How long a job may wait for a runner and still count as good."""
    objective: Annotated[float, Fraction(), Required("a share such as 0.95")]
    """The share of jobs that must start within `queue_time` (0 < objective < 1)."""

    @property
    def error_budget(self) -> float:
        """The share of jobs allowed to wait longer (1 - objective)."""
        return 1.0 - self.objective


def _boots(seconds: float) -> float:
    if seconds < MIN_BOOT_TIMEOUT:
        raise wrong(
            f"must be at least {MIN_BOOT_TIMEOUT:.0f}s: an instance needs that long to"
            " boot and register its runner, or it is terminated as an orphan"
        )
    return seconds


class RunnerTypeConfig(Section):
    """Runners with one label set, and the pools that provide them."""

    name: SkipJsonSchema[Annotated[str, Key()]] = Field(default="", exclude=True)
    """The runner type's name (its key under `runner_types`)."""
    labels: Annotated[frozenset[str], Labels()]
    """Labels every runner of this type carries (compared case-insensitively)."""
    pools: Annotated[tuple[str, ...], Strings()] = ()
    """Auto Scaling group names, tried in this order."""
    min_idle: Annotated[MinIdle, CountOrMinIdle()] = Field(default_factory=MinIdle)
    """Warm runners kept idle: a number, a weekly UTC schedule, or predicted from the
    arrival rate."""
    max: Annotated[int, Integer()] | None = None
    """Never more instances than this across the type's pools (nor the ASG MaxSize)."""
    priority: Annotated[int, Integer()] = 0
    """Higher gets capacity first under a shared budget."""
    idle_timeout: Annotated[float, Duration()] = 120.0
    """The longest an idle runner is kept before it is scaled in. It goes sooner when the
    jobs expected before the next poll will not take it. Until a boot was measured, this
    is also taken as the cost of one."""
    boot_timeout: Annotated[float, Duration(), AfterValidator(_boots)] = 900.0
    """An instance with no registered runner after this long is an orphan (at least
    `10s`)."""
    slo: QueueObjective | None = None
    """A queue-time objective (`{queue_time: 5m, objective: 0.95}`): exported as metrics
    and watched by the built-in "Queue-time objective burning" alert."""
    mode: Annotated[str, Choice(*MODES)] = DEFAULT_MODE
    """`ephemeral`: one job per machine, registered just in time by the controller;
    `persistent`: machines register their own runner and run job after job. New configs
    say `ephemeral`; the default stays `persistent` so that a file written before this
    key keeps its meaning."""
    runner_group_id: Annotated[int, Integer(1)] = DEFAULT_RUNNER_GROUP_ID
    """The GitHub runner group ephemeral runners join (1: Default)."""

    @model_validator(mode="after")
    def _min_idle_fits(self) -> Self:
        if self.max is not None and self.min_idle.maximum > self.max:
            fail((("min_idle",), f"must not exceed max ({self.max})"))
        return self

    @property
    def runner_type(self) -> RunnerType:
        return RunnerType(self.name, self.labels)

    @property
    def ephemeral(self) -> bool:
        """Its instances run one job each and get a JIT config from the controller."""
        return self.mode == EPHEMERAL


class BudgetConfig(Section):
    """Instances some runner types may hold together."""

    name: SkipJsonSchema[Annotated[str, Key()]] = Field(default="", exclude=True)
    """The budget's name (its key under `budgets`)."""
    max_instances: Annotated[int, Integer()]
    """Instances the matching runner types may hold together."""
    runner_types: Annotated[tuple[str, ...], Strings()]
    """Glob patterns over runner type names."""


def _backoff(initial: float, maximum: float, keys: tuple[str, str]) -> None:
    """A back-off that starts above its own cap is a typo in one of the two."""
    if initial > maximum:
        got = f"({format_seconds(maximum)}), got {format_seconds(initial)}"
        fail(((keys[0],), f"must not exceed {keys[1]} {got}"))


class RetryConfig(Section):
    """Our retry policy around every AWS call: full-jitter exponential back-off."""

    max_attempts: Annotated[int, Integer(1)] = 4
    """Attempts per cloud call, the first included."""
    deadline: Annotated[float, Duration(positive=True)] = 30.0
    """No new attempt starts after this long."""
    initial_backoff: Annotated[float, Duration()] = 0.5
    """Upper bound of the first wait; doubles each attempt; at most `max_backoff`."""
    max_backoff: Annotated[float, Duration()] = 8.0
    """Cap on one wait."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        _backoff(self.initial_backoff, self.max_backoff, ("initial_backoff", "max_backoff"))
        return self


class AwsConfig(Section):
    """Where the runner pools are, and how AWS calls are retried."""

    region: Annotated[str, Text()] = "us-east-1"
    """AWS region of the runner pools."""
    endpoint_url: Annotated[str, Text()] | None = None
    """Set for moto or another AWS-compatible endpoint."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    """Our retry policy around every AWS call."""
    botocore_max_attempts: Annotated[int, Integer(1)] = 1
    """botocore's own `total_max_attempts` (1: botocore does not retry; we do)."""
    interruption_queue_url: (
        Annotated[str, Text("^https?://", "an SQS queue URL (https://...)")] | None
    ) = None
    """The SQS queue EventBridge fills with the managed groups' EC2 Spot interruption
    warnings, rebalance recommendations and state changes (terraform creates it); absent:
    interruptions are not watched."""


class ScalingConfig(Section):
    """Limits of each tick's changes, and the back-off of pools out of capacity."""

    enabled: Annotated[bool, Flag()] = True
    """False: observe and alert only, never touch a pool."""
    max_scale_in_per_tick: Annotated[int, Integer()] = 20
    """Idle runners removed per tick at most."""
    max_cleanup_per_tick: Annotated[int, Integer()] = 5
    """Orphan instances and stale runners cleaned up per tick at most."""
    capacity_backoff_initial: Annotated[float, Duration()] = 300.0
    """How long a pool out of capacity is skipped at first; doubles each time; at most
    `capacity_backoff_max`."""
    capacity_backoff_max: Annotated[float, Duration()] = 1800.0
    """Cap on the capacity back-off."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        keys = ("capacity_backoff_initial", "capacity_backoff_max")
        _backoff(self.capacity_backoff_initial, self.capacity_backoff_max, keys)
        return self


class StateConfig(Section):
    """Where what must survive a restart lives (alert states, the outbox, capacity
    back-off, pending terminations, the GitHub ETag cache)."""

    backend: Annotated[str, Choice(SQLITE, DYNAMODB)] = SQLITE
    """`sqlite`: one process on one disk; `dynamodb`: one table several controllers
    share, with a leader lease."""
    path: Annotated[str, Text()] | None = DEFAULT_STATE_PATH
    """`sqlite`: the file, relative to the working directory (the image's is the state
    volume); `":memory:"` keeps it in memory, lost on restart."""
    table: Annotated[str, Text()] = ""
    """`dynamodb`: the table's name (region and endpoint from `aws`); create it with
    `ci-autoscaler state create-table` or the terraform module."""
    lease_duration: Annotated[float, Duration()] = 30.0
    """`dynamodb`: how long a leader may act after its last renewal. Renewed every third
    of it; a follower takes over once the lease went unrenewed this long; a leader stops
    acting with a fifth of it still left (the safety margin). At least `1s`."""

    @model_validator(mode="after")
    def _backend_keys(self) -> Self:
        """A key of the backend not chosen is refused rather than ignored."""
        given = self.model_fields_set
        problems: list[tuple[Where, str]] = []
        if self.backend == DYNAMODB:
            if "path" in given:
                problems.append(
                    (("path",), "is the SQLite file; backend dynamodb keeps state in a table")
                )
            if not self.table:
                problems.append(
                    (("table",), "is required with backend dynamodb (the table's name)")
                )
            elif not _TABLE_NAME.fullmatch(self.table):
                problems.append(
                    (
                        ("table",),
                        "must be 3-255 characters of letters, digits, '_', '-' or '.' "
                        f"(a DynamoDB table name), got {shown(self.table)}",
                    )
                )
            if self.lease_duration < MIN_LEASE_DURATION:
                problems.append(
                    (
                        ("lease_duration",),
                        f"must be at least {MIN_LEASE_DURATION:.0f}s (renewed every third of it)",
                    )
                )
        else:
            problems += [
                ((key,), "applies to backend dynamodb only (set state.backend)")
                for key in ("table", "lease_duration")
                if key in given
            ]
        if problems:
            fail(*problems)
        return self


class WebhookConfig(Section):
    """GitHub `workflow_job` webhooks: react to a queued job at once, poll to reconcile."""

    secret: Annotated[Secret, SecretText(), Required("GitHub signs every delivery with it")] = (
        Field(repr=False)
    )
    """The webhook's secret: every delivery's `X-Hub-Signature-256` is checked with it."""
    listen: Annotated[Address, Listen()] = Address("0.0.0.0", 9465)
    """Where `POST /github/webhook` is served (a listener of its own, never /metrics)."""
    reconcile_interval: Annotated[float, Duration(positive=True)] = 300.0
    """Time between reconcile polls while webhooks flow (lean: the jobs of runs the index
    cannot be wrong about are not re-read); when none arrives for longer, the controller
    polls every `poll_interval` again (the full poll) until they do."""
    max_body_bytes: Annotated[int, Integer(1024)] = 1_048_576
    """A delivery larger than this is refused with 413 unread (a `workflow_job` payload is
    a few tens of KiB)."""
    queue_size: Annotated[int, Integer(1)] = 1000
    """Verified deliveries waiting for the tick; when full the listener answers 503, so
    GitHub marks the delivery failed and the reconcile catches it. Only without a state
    store: `run` writes each delivery to the store's job index at once instead (a store
    that cannot take it: 503 likewise)."""
    debounce: Annotated[float, Duration(maximum=10.0)] = 0.2
    """How long a queued event waits for more before it wakes the tick: a 100-job matrix
    is one scale-up, not 100."""
    hook_id: Annotated[int, Integer(1)] | None = None
    """The organization webhook's id (*Settings > Webhooks*, the number in its URL): at
    each reconcile the controller reads the hook's delivery log, redelivers the
    `workflow_job` deliveries GitHub failed to make (GitHub never does on its own) and,
    when the log shows none lost since the last reconcile, skips the runs and jobs
    listings it makes only in case one was: a run's jobs are listed when its hour is up
    (the bound on a delivery GitHub never attempted), the runs listings once an hour. Needs
    the token's `admin:org_hook` scope (an App: the *Webhooks* organization permission,
    read and write). Absent: no log read, the lean reconcile alone."""

    @property
    def listen_host(self) -> str:
        return self.listen.host

    @property
    def listen_port(self) -> int:
        return self.listen.port


class TelemetryConfig(Section):
    """OpenTelemetry traces of each job's wait: one span for the wait, one child per
    stage. Off unless `otlp_endpoint` is set; needs the `otel` extra
    (`pip install 'ci-autoscaler[otel]'`)."""

    otlp_endpoint: Annotated[SecretUrl, Url()] | None = Field(default=None, repr=False)
    """The collector's OTLP/HTTP traces URL (`http://collector:4318/v1/traces`); absent:
    no traces."""
    service_name: Annotated[str, Text()] = "ci-autoscaler"
    """The traces' `service.name`."""
    headers: Mapping[str, Annotated[Secret, SecretText()]] = Field(default_factory=dict, repr=False)
    """HTTP headers sent with every export (a collector's `Authorization`), by name;
    their values are secrets (`${ENV}` works)."""
    timeout: Annotated[float, Duration(positive=True, maximum=60.0)] = 10.0
    """How long one export may take (exports run beside the loop, never in a tick)."""

    @model_validator(mode="after")
    def _exporter_installed(self) -> Self:
        """An endpoint needs the exporter: said at load (and by `check-config`), not when
        the first trace goes out. Looked up, not imported."""
        if self.otlp_endpoint is not None and not _installed(OTLP_EXPORTER):
            fail(
                (
                    ("otlp_endpoint",),
                    "traces need the OpenTelemetry SDK and exporter: install ci-autoscaler"
                    " with its otel extra (pip install 'ci-autoscaler[otel]')",
                )
            )
        return self


#: The module the ``otel`` extra brings (:mod:`autoscaler.tracing` imports it).
OTLP_EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


class Config(Section):
    """The ci-autoscaler configuration file."""

    poll_interval: Annotated[float, Duration(positive=True, maximum=MAX_POLL_INTERVAL)] = 30.0
    """Time between ticks (more than `0s`, at most `1h`)."""
    listen: Annotated[Address, Listen()] = Address("0.0.0.0", 9464)
    """Where /metrics, /healthz, /readyz and the page for on-call are served, `HOST:PORT`."""
    log_level: Annotated[str, Choice("debug", "info", "warning", "error")] = "info"
    """Log lines to stderr from this level."""
    github: GitHubConfig
    """GitHub: the API, the owner, the credential."""
    runner_types: Annotated[
        tuple[RunnerTypeConfig, ...], ByName(minimum=1), Required("at least one runner type")
    ]
    """The runner types, by name: each a label set and its pools."""
    budgets: Annotated[tuple[BudgetConfig, ...], ByName()] = ()
    """Shared instance budgets over runner types, by name."""
    pools: Annotated[tuple[PoolConfig, ...], ByName()] = ()
    """Auto Scaling groups' own settings (their warm pools), by group name; each a pool
    of a runner type."""
    scaling: ScalingConfig = Field(default_factory=ScalingConfig)
    """Limits of each tick's changes, and the capacity back-off."""
    aws: AwsConfig = Field(default_factory=AwsConfig)
    """AWS: region, endpoint, retries, the Spot interruption queue."""
    state: StateConfig = Field(default_factory=StateConfig)
    """Where what must survive a restart lives."""
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    """Alert rules, receivers and the built-in alerts."""
    webhook: WebhookConfig | None = None
    """GitHub webhooks; absent: polling alone."""
    simulation: SimulationConfig = Field(default_factory=SimulationConfig)
    """Only `ci-autoscaler simulate` reads it: the emulated fleet's boot times and
    outages."""
    jit: JitConfig = Field(default_factory=JitConfig)
    """Where ephemeral runners' JIT configs are handed over (SSM parameter path)."""
    job_retry: JobRetryConfig = Field(default_factory=JobRetryConfig)
    """Re-run jobs lost to infrastructure (off by default: it writes to repositories)."""
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    """OpenTelemetry traces of where each job's wait went (off by default)."""

    @field_validator("pools", mode="wrap")
    @classmethod
    def _known_pools(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> tuple[PoolConfig, ...]:
        """Every group listed is a runner type's (told with whatever else is wrong)."""
        known = info.context.pools if isinstance(info.context, FileContext) else None
        if known is None or not isinstance(value, dict):
            return handler(value)  # type: ignore[no-any-return]
        problems: list[tuple[Where, str]] = [
            ((str(name),), "not a pool of any runner type") for name in value if name not in known
        ]
        return together(value, handler, problems)  # type: ignore[no-any-return]

    @field_validator("runner_types")
    @classmethod
    def _told_apart(cls, types: tuple[RunnerTypeConfig, ...]) -> tuple[RunnerTypeConfig, ...]:
        """Each pool serves one type; each type has a label set of its own."""
        problems: list[tuple[Where, str]] = []
        pools: dict[str, str] = {}
        label_sets: dict[frozenset[str], str] = {}
        for rt in types:
            for pool in rt.pools:
                if pool in pools:
                    problems.append(
                        (
                            (rt.name, "pools"),
                            f"pool {pool!r} is already used by runner type {pools[pool]!r}",
                        )
                    )
                pools[pool] = rt.name
            if rt.labels in label_sets:
                problems.append(
                    (
                        (rt.name, "labels"),
                        f"same labels as runner type {label_sets[rt.labels]!r}: a job could "
                        "not tell the two apart (give each type a label of its own)",
                    )
                )
            label_sets.setdefault(rt.labels, rt.name)
        if problems:
            fail(*problems)
        return types

    @model_validator(mode="after")
    def _warm_pools_fit(self) -> Self:
        """Each listed group is a runner type's; AWS keeps a warm pool only for an
        on-demand group; only a persistent machine may go back to one."""
        types = {p: rt for rt in self.runner_types for p in rt.pools}
        problems: list[tuple[Where, str]] = []
        sized: dict[str, str] = {}
        for pool in self.pools:
            rt, warm = types.get(pool.name), pool.warm_pool
            if rt is None:  # built in code (a file's names are checked as it is read)
                problems.append((("pools", pool.name), "not a pool of any runner type"))
                continue
            if warm is None:
                continue
            if warm.sized and rt.slo is None:
                problems.append(
                    (
                        ("pools", pool.name, "warm_pool", "size"),
                        f"slo needs runner type {rt.name!r} to have an slo (queue_time and"
                        " objective): the warm pool is sized to meet it",
                    )
                )
            elif warm.sized and (first := sized.setdefault(rt.name, pool.name)) != pool.name:
                problems.append(
                    (
                        ("pools", pool.name, "warm_pool", "size"),
                        f"slo is already set on {first!r}: the warm capacity of runner type"
                        f" {rt.name!r} is sized for one pool",
                    )
                )
            if pool.capacity != ON_DEMAND:
                fallback = [p for p in rt.pools if p != pool.name and self.pool(p).warmable]
                hint = (
                    f"; its on-demand fallback {fallback[0]!r} can be warm"
                    if fallback
                    else "; an on-demand pool of the type can be warm"
                )
                problems.append(
                    (
                        ("pools", pool.name, "warm_pool"),
                        "needs an on-demand group: AWS keeps no warm pool for a group with Spot "
                        f"instances or a mixed instances policy (capacity: {pool.capacity}), "
                        "so this pool stays cold" + hint,
                    )
                )
            if warm.reuse and rt.ephemeral:
                problems.append(
                    (
                        ("pools", pool.name, "warm_pool", "reuse"),
                        f"needs mode: persistent (runner type {rt.name!r} is ephemeral: a "
                        "machine runs one job, and a used one never goes back to the warm pool)",
                    )
                )
        if problems:
            fail(*problems)
        return self

    @model_validator(mode="after")
    def _private_metrics(self) -> Self:
        hook = self.webhook
        if hook is not None and hook.listen == self.listen and self.listen.port:
            fail((("webhook", "listen"), "must differ from listen (/metrics stays private)"))
        return self

    @property
    def listen_host(self) -> str:
        return self.listen.host

    @property
    def listen_port(self) -> int:
        return self.listen.port

    def pool(self, name: str) -> PoolConfig:
        """The group's own settings (defaults when ``pools`` does not list it)."""
        for p in self.pools:
            if p.name == name:
                return p
        return PoolConfig(name=name)

    def runner_type(self, name: str) -> RunnerTypeConfig:
        for rt in self.runner_types:
            if rt.name == name:
                return rt
        raise KeyError(name)
