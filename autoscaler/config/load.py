"""YAML -> :class:`Config`, validated once at load with every problem reported.

Durations are read from strings like ``30s``/``5m``/``4h`` (one grammar, see
:mod:`autoscaler.config.reader`) and held as float seconds. The environment is read here
and nowhere else (``${VAR}`` in any string value). Problems come in the order of the file,
each with its line when read from a file, and a value already found wrong is not blamed
again by the checks that combine it with others.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.config.alerts import read_alerts
from autoscaler.config.checks import cross_check
from autoscaler.config.jit import DEFAULT_MODE, DEFAULT_RUNNER_GROUP_ID, MODES, read_jit
from autoscaler.config.job_retry import read_job_retry
from autoscaler.config.reader import Reader, join_path
from autoscaler.config.schedule import read_min_idle
from autoscaler.config.schema import (
    DEFAULT_HOSTED_LABELS,
    DEFAULT_STATE_PATH,
    DYNAMODB,
    MAX_POLL_INTERVAL,
    MIN_LEASE_DURATION,
    SQLITE,
    AwsConfig,
    BudgetConfig,
    Config,
    GitHubAppConfig,
    GitHubConfig,
    QueueObjective,
    RetryConfig,
    RunnerTypeConfig,
    ScalingConfig,
    StateConfig,
    WebhookConfig,
)
from autoscaler.config.secrets import Secret, shown
from autoscaler.config.simulation import read_simulation
from autoscaler.config.yamlfile import YamlDocument, YamlFileError, read_yaml
from autoscaler.domain import normalize_labels
from autoscaler.errors import ConfigError

MIN_BOOT_TIMEOUT = 10.0
"""The shortest ``boot_timeout`` accepted, in seconds. No EC2 instance boots and registers
a runner faster; below it every new instance would be judged an orphan (``0s`` made each
one a candidate the moment it launched). The orphan check's clock-skew guard, a quarter of
``boot_timeout``, must also stay above the one-second resolution of the ``Date`` headers
and launch times it compares."""

#: DynamoDB's table-name rule.
_TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")

_TOP_KEYS = (
    "poll_interval",
    "listen",
    "log_level",
    "github",
    "runner_types",
    "aws",
    "budgets",
    "scaling",
    "state",
    "alerts",
    "simulation",
    "jit",
    "webhook",
    "job_retry",
)


@dataclass(frozen=True)
class LoadedConfig:
    """A valid configuration and what was tolerated on the way (``--allow-unset-env``)."""

    config: Config
    warnings: tuple[str, ...] = ()


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a YAML file. Raises ConfigError listing every problem."""
    return read_config(path, env).config


def read_config(
    path: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    *,
    allow_unset_env: bool = False,
) -> LoadedConfig:
    """Read and validate a YAML file; ``allow_unset_env``: an unset ``${VAR}`` is a warning.

    Raises ConfigError listing every problem, in file order, each with its line.
    """
    try:
        doc = read_yaml(path)
    except YamlFileError as exc:
        raise ConfigError([f"{path}: {exc}"]) from None
    return _parse(doc, env, Path(path).parent, allow_unset_env=allow_unset_env, lines=True)


def parse_config(
    raw: Any, env: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> Config:
    """Validate an already-parsed document. Raises ConfigError listing every problem."""
    doc = YamlDocument(raw, _document_order(raw))
    return _parse(doc, env, base_dir or Path.cwd(), allow_unset_env=False, lines=False).config


def _document_order(raw: Any) -> dict[str, int]:
    """Path -> rank in pre-order (a parent before its children, siblings in the file's
    order: dicts keep it), each container visited once."""
    order: dict[str, int] = {}
    stack: list[tuple[str, Any]] = [("", raw)]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if path:
            order.setdefault(path, len(order) + 1)
        if id(value) in seen:
            continue
        if isinstance(value, dict):
            children = [(join_path(path, str(k)), v) for k, v in value.items()]
        elif isinstance(value, list):
            children = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        seen.add(id(value))
        stack.extend(reversed(children))
    return order


def _parse(
    doc: YamlDocument,
    env: Mapping[str, str] | None,
    base: Path,
    *,
    allow_unset_env: bool,
    lines: bool,
) -> LoadedConfig:
    r = Reader(env, allow_unset_env=allow_unset_env)
    for dup in doc.duplicates:
        r.problem(dup.path, dup.message, line=dup.line if lines else None)
    raw = doc.data
    top = r.mapping(raw, "", _TOP_KEYS)
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(r.problems)
    host, port = _listen(r, top.get("listen"))
    config = Config(
        poll_interval=r.duration(
            top.get("poll_interval"),
            "poll_interval",
            30.0,
            positive=True,
            maximum=MAX_POLL_INTERVAL,
        ),
        listen_host=host,
        listen_port=port,
        log_level=r.choice(
            top.get("log_level"), "log_level", ("debug", "info", "warning", "error"), "info"
        ),
        github=_github(r, top.get("github"), base),
        runner_types=_runner_types(r, top.get("runner_types")),
        aws=_aws(r, top.get("aws")),
        budgets=_budgets(r, top.get("budgets")),
        scaling=_scaling(r, top.get("scaling")),
        state=_state(r, top.get("state")),
        alerts=read_alerts(r, top.get("alerts"), base),
        webhook=_webhook(r, top.get("webhook")),
        simulation=read_simulation(r, top.get("simulation")),
        jit=read_jit(r, top.get("jit")),
        job_retry=read_job_retry(r, top.get("job_retry")),
    )
    hook = config.webhook
    if hook is not None and (hook.listen_host, hook.listen_port) == (host, port) and port:
        r.problem("webhook.listen", "must differ from listen (/metrics stays private)")
    cross_check(r, config)
    if r.found:
        raise ConfigError(r.report(doc.lines, lines=lines))
    return LoadedConfig(config, tuple(r.warnings))


def _listen(
    r: Reader, value: Any, path: str = "listen", default: tuple[str, int] = ("0.0.0.0", 9464)
) -> tuple[str, int]:
    if value is None:
        return default
    text = str(value)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        r.problem(path, f"must be HOST:PORT, got {shown(text)}")
        return default
    return host.strip("[]") or "0.0.0.0", int(port)


def _webhook(r: Reader, value: Any) -> WebhookConfig | None:
    """The optional ``webhook`` section: absent (or null), polling alone as before."""
    p = "webhook"
    if value is None:
        return None
    m = r.mapping(
        value,
        p,
        (
            "listen",
            "secret",
            "reconcile_interval",
            "max_body_bytes",
            "queue_size",
            "debounce",
            "hook_id",
        ),
    )
    if not isinstance(value, dict):
        return None
    secret = r.secret(m.get("secret"), f"{p}.secret")
    if m.get("secret") is None:
        r.problem(f"{p}.secret", "is required (GitHub signs every delivery with it)")
    host, port = _listen(r, m.get("listen"), f"{p}.listen", ("0.0.0.0", 9465))
    return WebhookConfig(
        secret=secret if secret is not None else Secret(""),
        listen_host=host,
        listen_port=port,
        reconcile_interval=r.duration(
            m.get("reconcile_interval"), f"{p}.reconcile_interval", 300.0, positive=True
        ),
        max_body_bytes=r.integer(
            m.get("max_body_bytes"), f"{p}.max_body_bytes", 1_048_576, minimum=1024
        ),
        queue_size=r.integer(m.get("queue_size"), f"{p}.queue_size", 1000, minimum=1),
        debounce=r.duration(m.get("debounce"), f"{p}.debounce", 0.2, maximum=10.0),
        hook_id=(
            None
            if m.get("hook_id") is None
            else r.integer(m.get("hook_id"), f"{p}.hook_id", minimum=1)
        ),
    )


def _github(r: Reader, value: Any, base: Path) -> GitHubConfig:
    path = "github"
    if value is None:
        r.problem(path, "is required")
        return GitHubConfig(owner="")
    m = r.mapping(
        value,
        path,
        (
            "api_url",
            "owner",
            "repos",
            "token",
            "app",
            "timeout",
            "max_concurrency",
            "hosted_labels",
            "rate_limit_share",
            "proxy",
        ),
    )
    app = None
    if m.get("app") is not None:
        a = r.mapping(m["app"], "github.app", ("app_id", "installation_id", "private_key_file"))
        key_path = r.string(a.get("private_key_file"), "github.app.private_key_file")
        key = ""
        if key_path:
            try:
                key = (base / key_path).read_text(encoding="utf-8")
            except OSError as exc:
                r.problem("github.app.private_key_file", f"cannot read: {exc.strerror}")
            except UnicodeDecodeError:
                r.problem("github.app.private_key_file", "is not UTF-8 text (a PEM key is ASCII)")
        app = GitHubAppConfig(
            app_id=r.integer(a.get("app_id"), "github.app.app_id", minimum=1),
            installation_id=r.integer(
                a.get("installation_id"), "github.app.installation_id", minimum=1
            ),
            private_key=Secret(key),
        )
    token = r.secret(m.get("token"), "github.token")
    if m.get("token") is None and app is None:
        r.problem(path, "needs either token or app")
    if token is not None and app is not None:
        r.problem(path, "set token or app, not both")
    api_url = r.string(m.get("api_url"), "github.api_url", "https://api.github.com")
    if r.ok("github.api_url") and not api_url.startswith(("http://", "https://")):
        r.problem("github.api_url", f"must be an http(s) URL, got {shown(api_url)}")
    share = r.number(m.get("rate_limit_share"), "github.rate_limit_share", 0.8)
    if not 0 < share <= 1:  # a NaN fails this too
        r.problem("github.rate_limit_share", f"must be above 0 and at most 1, got {share}")
    return GitHubConfig(
        owner=r.string(m.get("owner"), "github.owner"),
        api_url=api_url.rstrip("/"),
        repos=None if m.get("repos") is None else r.string_list(m["repos"], "github.repos"),
        token=token,
        app=app,
        timeout=r.duration(m.get("timeout"), "github.timeout", 10.0, positive=True),
        max_concurrency=r.integer(
            m.get("max_concurrency"), "github.max_concurrency", 16, minimum=1
        ),
        hosted_labels=tuple(
            label.lower()
            for label in r.string_list(
                m.get("hosted_labels"), "github.hosted_labels", default=DEFAULT_HOSTED_LABELS
            )
        ),
        rate_limit_share=share,
        proxy=r.url(m.get("proxy"), "github.proxy"),
    )


def _runner_types(r: Reader, value: Any) -> tuple[RunnerTypeConfig, ...]:
    path = "runner_types"
    if value is None:
        r.problem(path, "is required (at least one runner type)")
        return ()
    if not isinstance(value, dict) or not value:
        r.problem(path, "must be a non-empty mapping of name -> {labels: [...]}")
        return ()
    out = []
    for name, body in value.items():
        p = join_path(path, str(name))
        m = r.mapping(
            body,
            p,
            (
                "labels",
                "pools",
                "min_idle",
                "max",
                "priority",
                "idle_timeout",
                "boot_timeout",
                "slo",
                "mode",
                "runner_group_id",
            ),
        )
        boot_timeout = r.duration(m.get("boot_timeout"), f"{p}.boot_timeout", 900.0)
        if boot_timeout < MIN_BOOT_TIMEOUT:
            r.problem(
                f"{p}.boot_timeout",
                f"must be at least {MIN_BOOT_TIMEOUT:.0f}s: an instance needs that long to"
                " boot and register its runner, or it is terminated as an orphan",
            )
        out.append(
            RunnerTypeConfig(
                name=str(name),
                labels=normalize_labels(r.string_list(m.get("labels"), f"{p}.labels")),
                pools=r.string_list(m["pools"], f"{p}.pools") if "pools" in m else (),
                min_idle=read_min_idle(r, m.get("min_idle"), f"{p}.min_idle"),
                max=r.optional_integer(m.get("max"), f"{p}.max"),
                priority=r.integer(m.get("priority"), f"{p}.priority", 0),
                idle_timeout=r.duration(
                    m.get("idle_timeout"), f"{p}.idle_timeout", RunnerTypeConfig.idle_timeout
                ),
                boot_timeout=boot_timeout,
                slo=_slo(r, m.get("slo"), f"{p}.slo"),
                mode=r.choice(m.get("mode"), f"{p}.mode", MODES, DEFAULT_MODE),
                runner_group_id=r.integer(
                    m.get("runner_group_id"),
                    f"{p}.runner_group_id",
                    DEFAULT_RUNNER_GROUP_ID,
                    minimum=1,
                ),
            )
        )
    return tuple(out)


def _slo(r: Reader, value: Any, p: str) -> QueueObjective | None:
    """``{queue_time: 5m, objective: 0.95}``; both keys required. A value already reported
    (not a mapping, not a number, an unset variable) gets no follow-on range problem."""
    if value is None:
        return None
    if not isinstance(value, dict):
        r.mapping(value, p, ())  # says what it got
        return None
    m = r.mapping(value, p, ("queue_time", "objective"))
    queue_time = r.duration(m.get("queue_time"), f"{p}.queue_time", positive=True)
    path = f"{p}.objective"
    objective = 0.99  # only where a problem refuses the file
    if m.get("objective") is None:
        r.problem(path, "is required (a share such as 0.95)")
    else:
        share = r.number(m["objective"], path, objective)
        if r.ok(path) and not 0 < share < 1:
            r.problem(path, f"must be between 0 and 1 (exclusive), got {share:g}")
        elif r.ok(path):
            objective = share
    return QueueObjective(queue_time=queue_time, objective=objective)


def _aws(r: Reader, value: Any) -> AwsConfig:
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


def _state(r: Reader, value: Any) -> StateConfig:
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


def _budgets(r: Reader, value: Any) -> tuple[BudgetConfig, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        r.problem("budgets", "must be a mapping of name -> {max_instances, runner_types}")
        return ()
    out = []
    for name, body in value.items():
        p = join_path("budgets", str(name))
        m = r.mapping(body, p, ("max_instances", "runner_types"))
        out.append(
            BudgetConfig(
                name=str(name),
                max_instances=r.integer(m.get("max_instances"), f"{p}.max_instances"),
                runner_types=r.string_list(m.get("runner_types"), f"{p}.runner_types"),
            )
        )
    return tuple(out)


def _scaling(r: Reader, value: Any) -> ScalingConfig:
    p = "scaling"
    m = r.mapping(
        value,
        p,
        (
            "enabled",
            "max_scale_in_per_tick",
            "max_cleanup_per_tick",
            "capacity_backoff_initial",
            "capacity_backoff_max",
        ),
    )
    return ScalingConfig(
        enabled=r.boolean(m.get("enabled"), f"{p}.enabled", True),
        max_scale_in_per_tick=r.integer(
            m.get("max_scale_in_per_tick"),
            f"{p}.max_scale_in_per_tick",
            ScalingConfig.max_scale_in_per_tick,
        ),
        max_cleanup_per_tick=r.integer(
            m.get("max_cleanup_per_tick"), f"{p}.max_cleanup_per_tick", 5
        ),
        capacity_backoff_initial=r.duration(
            m.get("capacity_backoff_initial"), f"{p}.capacity_backoff_initial", 300.0
        ),
        capacity_backoff_max=r.duration(
            m.get("capacity_backoff_max"), f"{p}.capacity_backoff_max", 1800.0
        ),
    )
