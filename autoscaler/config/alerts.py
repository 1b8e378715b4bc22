"""The ``alerts`` section of the configuration: rules, rule files, receivers, built-ins.

Rule files are read by :mod:`autoscaler.config.load` before the section is checked (each
problem in a rule file is told with that file's line); the section puts their rules
before its own and checks that every rule names a configured receiver.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from typing import Annotated, Any, Self

import yaml
from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema
from pydantic_core import PydanticCustomError

from autoscaler.config.values import (
    ByName,
    Choice,
    Duration,
    FileContext,
    Flag,
    Integer,
    Key,
    Required,
    SecretText,
    Section,
    Strings,
    Text,
    Url,
    Where,
    fail,
    from_file,
    wrong,
)
from autoscaler.secrets import Secret, SecretUrl

PRIORITIES = ("P0", "P1", "P2", "P3", "P4")
#: The project's runbook page: an alert with no ``runbook_url`` of its own links its
#: section there, ``<this>#<anchor of the alert's name>``.
DEFAULT_RUNBOOK_BASE_URL = "https://ci-autoscaler.github.io/ci-autoscaler/runbook/"
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


class AlertRuleConfig(Section):
    """A threshold alert over the queues of some runner types."""

    name: Annotated[str, Text()]
    """The alert's name: its title is `[<priority>] <name>`."""
    team: Annotated[str, Text()]
    """The team paged (the `Team:` line)."""
    priority: Annotated[str, Choice(*PRIORITIES)] = "P2"
    """P0 (most urgent) to P4."""
    description: Annotated[str, Text()]
    """The `Description:` line: what is wrong, for the person paged."""
    receivers: Annotated[tuple[str, ...], Strings()]
    """Names of receivers (under `alerts.receivers`) it is sent to."""
    runbook_url: Annotated[str, Text()] = ""
    """The `Runbook:` line."""
    dashboard_url: Annotated[str, Text()] = ""
    """The `Dashboard:` line."""
    runner_types: Annotated[tuple[str, ...], Strings()] = ("*",)
    """Glob patterns over runner type names: the types it watches."""
    exclude_runner_types: Annotated[tuple[str, ...], Strings()] = ()
    """Glob patterns over runner type names it leaves out."""
    per_runner_type: Annotated[bool, Flag()] = False
    """True: one alert per runner type; false: one over all covered types."""
    max_queue_size: Annotated[int, Integer()] | None = None
    """Trips when the observed max queue size is above this."""
    max_queue_time: Annotated[float, Duration()] | None = None
    """Trips when the observed max queue time is above this."""
    match: Annotated[str, Choice("any", "all")] = "any"
    """`any`: one tripped check fires; `all`: every configured check must trip."""
    min_job_age: Annotated[float, Duration()] = 0.0
    """Jobs younger than this are not counted."""
    for_: Annotated[float, Duration()] = Field(default=0.0, alias="for")
    """Pending this long before firing."""
    repeat_interval: Annotated[float, Duration(positive=True)] = 4 * 3600.0
    """Re-notify this often while still firing."""

    @model_validator(mode="after")
    def _has_a_threshold(self) -> Self:
        if self.max_queue_size is None and self.max_queue_time is None:
            fail(((), "needs max_queue_size or max_queue_time (or both)"))
        return self


class _UrlOrUrls(Url):
    """``url``: one URL, or (an alertmanager receiver's cluster) a list of them."""

    def check(self, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list):
            return super().check(value, info)
        if not value:
            raise wrong("must be a non-empty list")
        urls, bad = [], []
        for i, item in enumerate(value):
            try:
                urls.append(super().check(item, info))
            except PydanticCustomError as exc:  # told with its place in the list
                bad.append(((i,), exc.message()))
        if bad:
            fail(*bad)
        return tuple(urls)

    def json_schema(self) -> JsonSchemaValue:
        one = super().json_schema()
        return {"anyOf": [one, {"type": "array", "items": one, "minItems": 1}]}


class ReceiverConfig(Section):
    """Where alerts go: a webhook, Slack, PagerDuty, Alertmanager or GitHub issues."""

    name: SkipJsonSchema[Annotated[str, Key()]] = Field(default="", exclude=True)
    """The receiver's name (its key under `alerts.receivers`)."""
    type: Annotated[str, Choice(*RECEIVER_TYPES), Required(f"one of {', '.join(RECEIVER_TYPES)}")]
    """What it speaks."""
    url: Annotated[SecretUrl, _UrlOrUrls()] | None = None
    """Where to POST (webhook, slack, alertmanager_webhook; a pagerduty override);
    alertmanager: one Alertmanager or a list of them; github_issue: the REST API root
    (default: `github.api_url`). A secret (a Slack webhook's path is its key; a URL may
    carry `user:password@`): logs and errors show `scheme://host` at most."""
    urls: Annotated[tuple[Annotated[SecretUrl, Url()], ...], Field(min_length=1)] = ()
    """alertmanager: every Alertmanager of the cluster (an HA pair), base URL or the full
    `/api/v2/alerts` path; each one gets every post (with `url`, duplicates dropped).
    Secrets, like `url`."""
    routing_key: Annotated[Secret, SecretText()] | None = Field(default=None, repr=False)
    """pagerduty: the Events API v2 integration key."""
    repo: Annotated[str, Text()] | None = None
    """github_issue: `owner/name` to open issues in."""
    token: Annotated[Secret, SecretText()] | None = Field(default=None, repr=False)
    """github_issue: a token; default: the github section's."""
    labels: Annotated[tuple[str, ...], Strings()] = ()
    """github_issue: extra labels."""
    timeout: Annotated[float, Duration(positive=True)] = 5.0
    """Per-attempt timeout."""
    max_attempts: Annotated[int, Integer(1)] = 3
    """Delivery attempts per tick."""

    @model_validator(mode="after")
    def _fits_its_type(self, info: ValidationInfo) -> Self:
        """The keys its type needs; an alertmanager's ``url`` (one, or a list) joins its
        ``urls``, and ``url`` is the first of them."""
        problems: list[tuple[Where, str]] = []
        url: Any = self.url
        urls = self.urls
        if self.type == "alertmanager" and (from_file(info) or isinstance(url, tuple)):
            listed = (url if isinstance(url, tuple) else () if url is None else (url,)) + urls
            urls = tuple({u.reveal(): u for u in listed}.values())
            url = urls[0] if urls else None
        elif self.type != "alertmanager":
            if isinstance(url, tuple):
                problems.append((("url",), "must be one URL (a list is for alertmanager)"))
            if urls:
                problems.append((("urls",), "is for alertmanager receivers only (use url)"))
        if self.type in _URL_TYPES and url is None:
            either = " (or urls)" if self.type == "alertmanager" else ""
            a = "an" if self.type.startswith("a") else "a"
            problems.append((("url",), f"is required{either} for {a} {self.type} receiver"))
        if self.type == "pagerduty" and self.routing_key is None:
            problems.append((("routing_key",), "is required for a pagerduty receiver"))
        if self.type == "github_issue" and (self.repo is None or "/" not in self.repo):
            problems.append((("repo",), "is required for a github_issue receiver, as owner/name"))
        if problems:
            fail(*problems)
        if (url, urls) == (self.url, self.urls):
            return self
        return self.model_copy(update={"url": url, "urls": urls})


class StageRegressionConfig(Section):
    """When a stage of the jobs' wait regressed: per runner type and stage, the p95 of the
    jobs that started in the last `recent` against the `baseline` before it."""

    enabled: Annotated[bool, Flag()] = True
    """Alert when a stage of a runner type's wait regressed."""
    recent: Annotated[float, Duration(positive=True)] = 3600.0
    """The window of jobs judged (it ends now)."""
    baseline: Annotated[float, Duration(positive=True)] = 86400.0
    """The window compared against, right before `recent`."""
    min_jobs: Annotated[int, Integer(20)] = 20
    """Jobs each window needs before it is judged. At least 20: with fewer, one slow job
    is the p95 of its window on its own."""
    min_growth_pct: Annotated[int, Integer(1)] = 100
    """How much the stage's p95 must have grown, in percent of the baseline's (100: it
    doubled)."""
    min_increase: Annotated[float, Duration(positive=True)] = 60.0
    """How many seconds the stage's p95 must have grown at least, so a stage of a few
    seconds that doubles does not page."""


class BuiltinAlertsConfig(Section):
    """The alerts that need no rule: unmatched jobs, GitHub unreachable or over budget,
    clock skew, queue-time objectives burning."""

    team: Annotated[str, Text()] = "dev-infra"
    """The team paged."""
    priority: Annotated[str, Choice(*PRIORITIES)] = "P2"
    """Their priority."""
    receivers: Annotated[tuple[str, ...], Strings()] = ()
    """Receivers of the built-in alerts; empty: every receiver."""
    unmatched_jobs: Annotated[bool, Flag()] = True
    """Alert on jobs whose labels no runner type serves."""
    github_unreachable_after: Annotated[float, Duration()] = 600.0
    """Alert when no poll of GitHub succeeded for this long."""
    clock_skew_max: Annotated[float, Duration()] = 60.0
    """Alert when GitHub's or AWS's clock (their answers' `Date`) is further than this from
    ours; `0s` turns the alert off (orphan cleanup still stops at a quarter of
    `boot_timeout`)."""
    github_budget: Annotated[bool, Flag()] = True
    """Alert when GitHub's rate limit (`github.rate_limit_share` of it) cannot cover
    re-listing the repositories with queued jobs every poll interval."""
    queue_time_objective: Annotated[bool, Flag()] = True
    """Alert when a runner type's queue-time objective (its `slo`) burns too fast."""
    stage_regression: StageRegressionConfig = Field(default_factory=StageRegressionConfig)
    """Alert naming the stage of the jobs' wait that regressed (`boot`, `launch`, ...)."""
    shipped_rules: Annotated[bool, Flag()] = True
    """Evaluate the queue rules shipped in the package ("Jobs queueing too long"), with
    this section's team, priority, receivers and links; a rule of `rules` or `rule_files`
    with the same name replaces one."""
    runbook_url: Annotated[str, Text()] = ""
    """Their `Runbook:` line."""
    dashboard_url: Annotated[str, Text()] = ""
    """Their `Dashboard:` line."""


class AlertsConfig(Section):
    """Alert rules, where alerts go, and the built-in alerts."""

    rule_files: Annotated[tuple[str, ...], Strings()] = ()
    """Glob patterns of YAML files with a `rules:` list each (relative to this file);
    their rules come before `rules`."""
    # validated when left out too: the rule files' rules join here
    rules: tuple[AlertRuleConfig, ...] = Field(default=(), validate_default=True)
    """Threshold alerts."""
    receivers: Annotated[Mapping[str, ReceiverConfig], ByName()] = Field(default_factory=dict)
    """Receivers, by name."""
    builtin: BuiltinAlertsConfig = Field(default_factory=BuiltinAlertsConfig)
    """The built-in alerts."""
    alertmanager_resend: Annotated[float, Duration()] = 60.0
    """Re-post firing alerts to `alertmanager` receivers at least this often (Prometheus's
    `--rules.alert.resend-delay`, 1m). Each post says the alert is valid for
    4 x max(this, `poll_interval`), so Alertmanager never expires an alert that still fires,
    and does expire it if the controller dies."""
    runbook_base_url: Annotated[str, Text(r"^https?://", "an http(s) URL")] = (
        DEFAULT_RUNBOOK_BASE_URL
    )
    """The runbook page an alert without a `runbook_url` of its own links to, at the
    section named after the alert (`#github-unreachable`)."""

    @field_validator("rule_files")
    @classmethod
    def _matched(cls, patterns: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        read = info.context.rule_files if isinstance(info.context, FileContext) else {}
        unmatched = [
            ((i,), f"no file matches {pattern!r}")
            for i, pattern in enumerate(patterns)
            if pattern in read and read[pattern] is None
        ]
        if unmatched:
            fail(*unmatched)
        return patterns

    @field_validator("rules")
    @classmethod
    def _after_rule_files(
        cls, rules: tuple[AlertRuleConfig, ...], info: ValidationInfo
    ) -> tuple[AlertRuleConfig, ...]:
        """The rule files' rules come first."""
        read = info.context.rule_files if isinstance(info.context, FileContext) else {}
        patterns = info.data.get("rule_files", ())
        return tuple(r for p in patterns for r in read.get(p) or ()) + rules

    @model_validator(mode="after")
    def _with_shipped_rules(self) -> Self:
        """The shipped rules first (unless turned off, or replaced by a rule of the same
        name), with the built-in alerts' team, priority, receivers and links."""
        if not self.builtin.shipped_rules:
            return self
        b = self.builtin
        links = {"runbook_url": b.runbook_url, "dashboard_url": b.dashboard_url}
        names = {rule.name for rule in self.rules}
        shipped = tuple(
            AlertRuleConfig.model_validate(
                {
                    **body,
                    "team": b.team,
                    "priority": b.priority,
                    "receivers": b.receivers or tuple(self.receivers),
                    **{k: v for k, v in links.items() if v},
                }
            )
            for body in shipped_rule_bodies()
            if body["name"] not in names
        )
        # self, not a copy: pydantic takes an after-validator's other object only from
        # model_validate, not from the constructor (AlertsConfig(...)).
        object.__setattr__(self, "rules", shipped + self.rules)
        return self

    @model_validator(mode="after")
    def _receivers_known(self) -> Self:
        """Every rule's receivers are configured."""
        problems: list[tuple[Where, str]] = [
            (("rules", i, "receivers"), f"unknown receiver {name!r}")
            for i, rule in enumerate(self.rules)
            for name in rule.receivers
            if name not in self.receivers
        ]
        problems += [
            (("builtin", "receivers"), f"unknown receiver {name!r}")
            for name in self.builtin.receivers
            if name not in self.receivers
        ]
        if problems:
            fail(*problems)
        return self


@cache
def shipped_rule_bodies() -> tuple[dict[str, Any], ...]:
    """The rules shipped in the package (``shipped_rules.yaml``, package data, read with
    importlib.resources so the wheel and the image carry them), without the keys
    ``alerts.builtin`` gives them."""
    text = files("autoscaler.config").joinpath("shipped_rules.yaml").read_text("utf-8")
    return tuple(yaml.safe_load(text)["rules"])


class RuleFile(Section):
    """A file of ``alerts.rule_files``."""

    rules: tuple[AlertRuleConfig, ...] = ()
    """Threshold alerts, as under `alerts.rules`."""
