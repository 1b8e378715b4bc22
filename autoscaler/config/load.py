"""YAML -> :class:`Config`, validated once at load with every problem reported.

Durations are read from strings like ``30s``/``5m``/``4h`` and held as float seconds.
The environment is read here and nowhere else (``${VAR}`` in any string value).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from autoscaler.config.alerts import read_alerts
from autoscaler.config.reader import Reader, Secret, join_path, yaml_where
from autoscaler.config.schedule import read_min_idle
from autoscaler.config.schema import (
    DEFAULT_HOSTED_LABELS,
    DEFAULT_STATE_PATH,
    AwsConfig,
    BudgetConfig,
    Config,
    GitHubAppConfig,
    GitHubConfig,
    RetryConfig,
    RunnerTypeConfig,
    ScalingConfig,
    StateConfig,
)
from autoscaler.config.simulation import check_pools, read_simulation
from autoscaler.domain import normalize_labels
from autoscaler.errors import ConfigError


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a YAML file. Raises ConfigError listing every problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {yaml_where(exc)}"]) from None
    return parse_config(raw, env=env, base_dir=Path(path).parent)


def parse_config(
    raw: Any, env: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> Config:
    """Validate an already-parsed document. Raises ConfigError listing every problem."""
    r = Reader(env)
    base = base_dir or Path.cwd()
    top = r.mapping(
        raw,
        "",
        (
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
        ),
    )
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(r.problems)
    host, port = _listen(r, top.get("listen"))
    config = Config(
        poll_interval=r.duration(top.get("poll_interval"), "poll_interval", 30.0),
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
        state=StateConfig(
            path=r.string(
                r.mapping(top.get("state"), "state", ("path",)).get("path"),
                "state.path",
                DEFAULT_STATE_PATH,
            )
        ),
        alerts=read_alerts(r, top.get("alerts"), base),
        simulation=read_simulation(r, top.get("simulation")),
    )
    if config.poll_interval <= 0 and "poll_interval" in top:
        r.problem("poll_interval", "must be greater than zero")
    _cross_check(r, config)
    if r.problems:
        raise ConfigError(r.problems)
    return config


def _listen(r: Reader, value: Any) -> tuple[str, int]:
    if value is None:
        return "0.0.0.0", 9464
    text = str(value)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        r.problem("listen", f"must be HOST:PORT, got {text!r}")
        return "0.0.0.0", 9464
    return host.strip("[]") or "0.0.0.0", int(port)


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
    if not api_url.startswith(("http://", "https://")):
        r.problem("github.api_url", f"must be an http(s) URL, got {api_url!r}")
    return GitHubConfig(
        owner=r.string(m.get("owner"), "github.owner"),
        api_url=api_url.rstrip("/"),
        repos=None if m.get("repos") is None else r.string_list(m["repos"], "github.repos"),
        token=token,
        app=app,
        timeout=r.duration(m.get("timeout"), "github.timeout", 10.0),
        max_concurrency=r.integer(
            m.get("max_concurrency"), "github.max_concurrency", 16, minimum=1
        ),
        hosted_labels=tuple(
            label.lower()
            for label in r.string_list(
                m.get("hosted_labels"), "github.hosted_labels", default=DEFAULT_HOSTED_LABELS
            )
        ),
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
            ("labels", "pools", "min_idle", "max", "priority", "idle_timeout", "boot_timeout"),
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
                boot_timeout=r.duration(m.get("boot_timeout"), f"{p}.boot_timeout", 900.0),
            )
        )
    return tuple(out)


def _aws(r: Reader, value: Any) -> AwsConfig:
    m = r.mapping(value, "aws", ("region", "endpoint_url", "retry", "botocore_max_attempts"))
    rt = r.mapping(
        m.get("retry"), "aws.retry", ("max_attempts", "deadline", "initial_backoff", "max_backoff")
    )
    return AwsConfig(
        region=r.string(m.get("region"), "aws.region", "us-east-1"),
        endpoint_url=r.optional_string(m.get("endpoint_url"), "aws.endpoint_url"),
        retry=RetryConfig(
            max_attempts=r.integer(rt.get("max_attempts"), "aws.retry.max_attempts", 4, minimum=1),
            deadline=r.duration(rt.get("deadline"), "aws.retry.deadline", 30.0),
            initial_backoff=r.duration(rt.get("initial_backoff"), "aws.retry.initial_backoff", 0.5),
            max_backoff=r.duration(rt.get("max_backoff"), "aws.retry.max_backoff", 8.0),
        ),
        botocore_max_attempts=r.integer(
            m.get("botocore_max_attempts"), "aws.botocore_max_attempts", 1, minimum=1
        ),
    )


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


def _cross_check(r: Reader, config: Config) -> None:
    """Problems that span sections: references to names defined elsewhere."""
    known = set(config.alerts.receivers)
    for i, rule in enumerate(config.alerts.rules):
        for name in rule.receivers:
            if name not in known:
                r.problem(f"alerts.rules[{i}].receivers", f"unknown receiver {name!r}")
    for name in config.alerts.builtin.receivers:
        if name not in known:
            r.problem("alerts.builtin.receivers", f"unknown receiver {name!r}")
    seen: dict[str, str] = {}
    for rt in config.runner_types:
        for pool in rt.pools:
            if pool in seen:
                r.problem(
                    f"runner_types.{rt.name}.pools",
                    f"pool {pool!r} is already used by runner type {seen[pool]!r}",
                )
            seen[pool] = rt.name
        if rt.max is not None and rt.min_idle.maximum > rt.max:
            r.problem(f"runner_types.{rt.name}.min_idle", f"must not exceed max ({rt.max})")
    check_pools(r, config.simulation, set(seen))
