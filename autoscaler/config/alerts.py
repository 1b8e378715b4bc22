"""The ``alerts`` section of the configuration: rules, rule files, receivers, built-ins."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoscaler.config.reader import Reader, join_path
from autoscaler.config.yamlfile import YamlFileError, read_yaml
from autoscaler.secrets import Secret, SecretUrl

PRIORITIES = ("P0", "P1", "P2", "P3", "P4")
RECEIVER_TYPES = (
    "webhook",
    "slack",
    "pagerduty",
    "alertmanager",
    "alertmanager_webhook",
    "github_issue",
)
#: Receiver types that POST to ``url`` and need one.
_URL_TYPES = ("webhook", "slack", "alertmanager", "alertmanager_webhook")


@dataclass(frozen=True)
class AlertRuleConfig:
    name: str
    team: str
    priority: str
    description: str
    receivers: tuple[str, ...]
    runbook_url: str = ""
    dashboard_url: str = ""
    runner_types: tuple[str, ...] = ("*",)
    """Glob patterns over runner type names."""
    exclude_runner_types: tuple[str, ...] = ()
    per_runner_type: bool = False
    """True: one alert per runner type; False: one over all covered types."""
    max_queue_size: int | None = None
    """Trips when the observed max queue size is above this."""
    max_queue_time: float | None = None
    """Trips when the observed max queue time (seconds) is above this."""
    match: str = "any"
    """``any``: one tripped check fires; ``all``: every configured check must trip."""
    min_job_age: float = 0.0
    """Jobs younger than this (seconds) are not counted."""
    for_: float = 0.0
    """Pending this long (seconds) before firing (YAML key ``for``)."""
    repeat_interval: float = 4 * 3600.0
    """Re-notify while still firing (more than zero)."""


@dataclass(frozen=True)
class ReceiverConfig:
    name: str
    type: str
    url: SecretUrl | None = None
    """Where to POST (webhook, slack, alertmanager_webhook, pagerduty override);
    alertmanager: the first of ``urls``; github_issue: the REST API root override
    (default: the github section's ``api_url``). A secret (a Slack webhook's path is its
    key; a URL may carry ``user:password@``): reprs, logs and errors show only
    ``scheme://host``; ``url.reveal()`` is for the request alone. A plain ``str`` given
    here is wrapped."""
    urls: tuple[SecretUrl, ...] = ()
    """alertmanager: every Alertmanager of the cluster (an HA pair), base URL or the full
    ``/api/v2/alerts`` path; each one gets every post (YAML ``url`` and/or ``urls``).
    Secrets, like ``url``."""
    routing_key: Secret | None = field(default=None, repr=False)
    """PagerDuty Events API v2 integration key."""
    repo: str | None = None
    """github_issue: ``owner/name`` to open issues in."""
    token: Secret | None = field(default=None, repr=False)
    """github_issue: token; defaults to the github section's token."""
    labels: tuple[str, ...] = ()
    """github_issue: extra labels."""
    timeout: float = 5.0
    """Per-attempt timeout in seconds (more than zero)."""
    max_attempts: int = 3
    """Delivery attempts per tick."""

    def __post_init__(self) -> None:
        if isinstance(self.url, str):  # built in code (tests, the demo): still a secret
            object.__setattr__(self, "url", SecretUrl(self.url))
        if any(isinstance(u, str) for u in self.urls):
            wrapped = tuple(SecretUrl(u) if isinstance(u, str) else u for u in self.urls)
            object.__setattr__(self, "urls", wrapped)


@dataclass(frozen=True)
class BuiltinAlertsConfig:
    team: str = "dev-infra"
    priority: str = "P2"
    receivers: tuple[str, ...] = ()
    """Receivers of the built-in alerts; empty: every receiver."""
    unmatched_jobs: bool = True
    """Alert on jobs whose labels no runner type serves."""
    github_unreachable_after: float = 600.0
    """Alert when no poll of GitHub succeeded for this long."""
    clock_skew_max: float = 60.0
    """Alert when GitHub's or AWS's clock (their answers' ``Date``) is further than this
    from ours; 0 turns the alert off (orphan cleanup still stops at a quarter of
    ``boot_timeout``)."""
    github_budget: bool = True
    """Alert when GitHub's rate limit (``github.rate_limit_share`` of it) cannot cover
    re-listing the repositories with queued jobs every poll interval."""
    queue_time_objective: bool = True
    """Alert when a runner type's queue-time objective (its ``slo``) burns too fast."""
    runbook_url: str = ""
    dashboard_url: str = ""


@dataclass(frozen=True)
class AlertsConfig:
    rules: tuple[AlertRuleConfig, ...] = ()
    receivers: Mapping[str, ReceiverConfig] = field(default_factory=dict)
    builtin: BuiltinAlertsConfig = BuiltinAlertsConfig()
    alertmanager_resend: float = 60.0
    """Re-post firing alerts to ``alertmanager`` receivers at least this often (seconds;
    Prometheus's ``--rules.alert.resend-delay``, 1m). Each post says the alert is valid
    for 4 x max(this, poll_interval), so Alertmanager never expires an alert that still
    fires, and does expire it if the controller dies."""


_RULE_KEYS = (
    "name",
    "team",
    "priority",
    "description",
    "runbook_url",
    "dashboard_url",
    "runner_types",
    "exclude_runner_types",
    "per_runner_type",
    "max_queue_size",
    "max_queue_time",
    "match",
    "min_job_age",
    "for",
    "repeat_interval",
    "receivers",
)


def _rule(r: Reader, value: Any, p: str) -> AlertRuleConfig | None:
    if not isinstance(value, dict):
        r.problem(p, "must be a mapping")
        return None
    m = r.mapping(value, p, _RULE_KEYS)
    rule = AlertRuleConfig(
        name=r.string(m.get("name"), f"{p}.name"),
        team=r.string(m.get("team"), f"{p}.team"),
        priority=r.choice(m.get("priority"), f"{p}.priority", PRIORITIES, "P2"),
        description=r.string(m.get("description"), f"{p}.description"),
        receivers=r.string_list(m.get("receivers"), f"{p}.receivers"),
        runbook_url=r.string(m.get("runbook_url"), f"{p}.runbook_url", ""),
        dashboard_url=r.string(m.get("dashboard_url"), f"{p}.dashboard_url", ""),
        runner_types=r.string_list(m.get("runner_types"), f"{p}.runner_types", default=("*",)),
        exclude_runner_types=r.string_list(
            m.get("exclude_runner_types"), f"{p}.exclude_runner_types", default=()
        ),
        per_runner_type=r.boolean(m.get("per_runner_type"), f"{p}.per_runner_type", False),
        max_queue_size=r.optional_integer(m.get("max_queue_size"), f"{p}.max_queue_size"),
        max_queue_time=r.optional_duration(m.get("max_queue_time"), f"{p}.max_queue_time"),
        match=r.choice(m.get("match"), f"{p}.match", ("any", "all"), "any"),
        min_job_age=r.duration(m.get("min_job_age"), f"{p}.min_job_age", 0.0),
        for_=r.duration(m.get("for"), f"{p}.for", 0.0),
        repeat_interval=r.duration(
            m.get("repeat_interval"), f"{p}.repeat_interval", 4 * 3600.0, positive=True
        ),
    )
    if rule.max_queue_size is None and rule.max_queue_time is None:
        r.problem(p, "needs max_queue_size or max_queue_time (or both)")
    return rule


def _rule_files(r: Reader, patterns: tuple[str, ...], base: Path) -> tuple[AlertRuleConfig, ...]:
    rules: list[AlertRuleConfig] = []
    for i, pattern in enumerate(patterns):
        full = pattern if os.path.isabs(pattern) else str(base / pattern)
        matches = sorted(glob.glob(full))
        if not matches:
            r.problem(f"alerts.rule_files[{i}]", f"no file matches {pattern!r}")
        for file in matches:
            try:
                parsed = read_yaml(file)
            except YamlFileError as exc:
                r.problem(file, f"cannot read rules: {exc}")
                continue
            for dup in parsed.duplicates:
                r.problem(f"{file}: line {dup.line}: {dup.path}", dup.message)
            doc = parsed.data
            if isinstance(doc, dict):
                doc = r.mapping(doc, file, ("rules",)).get("rules")
            rules.extend(r.each(doc, f"{file}: rules", lambda v, p: _rule(r, v, p)))
    return tuple(rules)


def _receiver(r: Reader, name: str, value: Any) -> ReceiverConfig:
    p = join_path("alerts.receivers", name)
    m = r.mapping(
        value,
        p,
        (
            "type",
            "url",
            "urls",
            "routing_key",
            "repo",
            "token",
            "labels",
            "timeout",
            "max_attempts",
        ),
    )
    rtype = r.choice(m.get("type"), f"{p}.type", RECEIVER_TYPES, "webhook")
    if m.get("type") is None:
        r.problem(f"{p}.type", f"is required (one of {', '.join(RECEIVER_TYPES)})")
    urls: tuple[SecretUrl, ...] = ()
    if rtype == "alertmanager":
        urls = _alertmanager_urls(r, m.get("url"), m.get("urls"), p)
        url = urls[0] if urls else None
    else:
        if m.get("urls") is not None:
            r.problem(f"{p}.urls", "is for alertmanager receivers only (use url)")
        url = r.url(m.get("url"), f"{p}.url")
    rc = ReceiverConfig(
        name=name,
        type=rtype,
        url=url,
        urls=urls,
        routing_key=r.secret(m.get("routing_key"), f"{p}.routing_key"),
        repo=r.optional_string(m.get("repo"), f"{p}.repo"),
        token=r.secret(m.get("token"), f"{p}.token"),
        labels=r.string_list(m.get("labels"), f"{p}.labels", default=()),
        timeout=r.duration(m.get("timeout"), f"{p}.timeout", 5.0, positive=True),
        max_attempts=r.integer(m.get("max_attempts"), f"{p}.max_attempts", 3, minimum=1),
    )
    given = m.get("url") is not None or m.get("urls") is not None  # if wrong: said already
    if rtype in _URL_TYPES and not given:
        either = " (or urls)" if rtype == "alertmanager" else ""
        a = "an" if rtype.startswith("a") else "a"
        r.problem(f"{p}.url", f"is required{either} for {a} {rtype} receiver")
    if rtype == "pagerduty" and rc.routing_key is None:
        r.problem(f"{p}.routing_key", "is required for a pagerduty receiver")
    if rtype == "github_issue" and (rc.repo is None or "/" not in rc.repo):
        r.problem(f"{p}.repo", "is required for a github_issue receiver, as owner/name")
    return rc


def _alertmanager_urls(r: Reader, url: Any, urls: Any, p: str) -> tuple[SecretUrl, ...]:
    """``url`` (one, or a list) plus ``urls``: every Alertmanager, each http(s)://host,
    each a secret like any receiver URL (never echoed in a problem)."""
    items: list[tuple[Any, str]] = []
    for key, value in (("url", url), ("urls", urls)):
        if isinstance(value, list):
            if not value:
                r.problem(f"{p}.{key}", "must be a non-empty list")
            items += [(u, f"{p}.{key}[{i}]") for i, u in enumerate(value)]
        elif value is not None and key == "url":
            items.append((value, f"{p}.url"))
        elif value is not None:
            r.problem(f"{p}.urls", "must be a list of URLs")
    found = [r.url(u, path) for u, path in items]
    unique = {u.reveal(): u for u in found if u is not None}
    return tuple(unique.values())


def read_alerts(r: Reader, value: Any, base: Path) -> AlertsConfig:
    """The ``alerts`` section, rule files included (globs relative to ``base``)."""
    m = r.mapping(
        value, "alerts", ("rule_files", "rules", "receivers", "builtin", "alertmanager_resend")
    )
    files = r.string_list(m.get("rule_files"), "alerts.rule_files", default=())
    rules = _rule_files(r, files, base) + r.each(
        m.get("rules"), "alerts.rules", lambda v, p: _rule(r, v, p)
    )
    raw_receivers = m.get("receivers") or {}
    if not isinstance(raw_receivers, dict):
        r.problem("alerts.receivers", "must be a mapping of name -> receiver")
        raw_receivers = {}
    receivers = {str(n): _receiver(r, str(n), body) for n, body in raw_receivers.items()}
    b = r.mapping(
        m.get("builtin"),
        "alerts.builtin",
        (
            "team",
            "priority",
            "receivers",
            "unmatched_jobs",
            "github_budget",
            "github_unreachable_after",
            "clock_skew_max",
            "queue_time_objective",
            "runbook_url",
            "dashboard_url",
        ),
    )
    builtin = BuiltinAlertsConfig(
        team=r.string(b.get("team"), "alerts.builtin.team", "dev-infra"),
        priority=r.choice(b.get("priority"), "alerts.builtin.priority", PRIORITIES, "P2"),
        receivers=r.string_list(b.get("receivers"), "alerts.builtin.receivers", default=()),
        unmatched_jobs=r.boolean(b.get("unmatched_jobs"), "alerts.builtin.unmatched_jobs", True),
        github_budget=r.boolean(b.get("github_budget"), "alerts.builtin.github_budget", True),
        github_unreachable_after=r.duration(
            b.get("github_unreachable_after"), "alerts.builtin.github_unreachable_after", 600.0
        ),
        clock_skew_max=r.duration(b.get("clock_skew_max"), "alerts.builtin.clock_skew_max", 60.0),
        queue_time_objective=r.boolean(
            b.get("queue_time_objective"), "alerts.builtin.queue_time_objective", True
        ),
        runbook_url=r.string(b.get("runbook_url"), "alerts.builtin.runbook_url", ""),
        dashboard_url=r.string(b.get("dashboard_url"), "alerts.builtin.dashboard_url", ""),
    )
    resend = r.duration(m.get("alertmanager_resend"), "alerts.alertmanager_resend", 60.0)
    return AlertsConfig(
        rules=rules, receivers=receivers, builtin=builtin, alertmanager_resend=resend
    )
