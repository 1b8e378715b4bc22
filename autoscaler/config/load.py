"""YAML -> :class:`Config`, validated once at load with every problem reported.

Durations are read from strings like ``30s``/``5m``/``4h`` (one grammar, see
:mod:`autoscaler.config.reader`) and held as float seconds. The environment is read here
and nowhere else (``${VAR}`` in any string value). Problems come in the order of the file,
each with its line when read from a file, and a value already found wrong is not blamed
again by the checks that combine it with others.

Each section has its reader beside this module (``github``/``webhook``:
:mod:`~autoscaler.config.github`; ``runner_types``/``budgets``/``scaling``:
:mod:`~autoscaler.config.scaling`; ``aws``/``state``: :mod:`~autoscaler.config.aws`;
``alerts``, ``jit``, ``job_retry``, ``simulation``: their own); this one reads the file,
the top-level keys, and puts the sections together.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.config.alerts import read_alerts
from autoscaler.config.aws import read_aws, read_state
from autoscaler.config.checks import cross_check
from autoscaler.config.github import read_github, read_webhook
from autoscaler.config.jit import read_jit
from autoscaler.config.job_retry import read_job_retry
from autoscaler.config.reader import Reader, join_path
from autoscaler.config.scaling import read_budgets, read_runner_types, read_scaling
from autoscaler.config.schema import MAX_POLL_INTERVAL, Config
from autoscaler.config.simulation import read_simulation
from autoscaler.config.yamlfile import YamlDocument, YamlFileError, read_yaml
from autoscaler.errors import ConfigError

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
    if doc.data is None:  # an empty file: two "is required" lines would not say why
        raise ConfigError([f"{path}: the file is empty: start from config.example.yaml"])
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
    host, port = r.listen(top.get("listen"))
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
        github=read_github(r, top.get("github"), base),
        runner_types=read_runner_types(r, top.get("runner_types")),
        aws=read_aws(r, top.get("aws")),
        budgets=read_budgets(r, top.get("budgets")),
        scaling=read_scaling(r, top.get("scaling")),
        state=read_state(r, top.get("state")),
        alerts=read_alerts(r, top.get("alerts"), base),
        webhook=read_webhook(r, top.get("webhook")),
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
