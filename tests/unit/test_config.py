"""Config: every problem reported at once, with its path; secrets never shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.config import load_config, parse_config
from autoscaler.config.durations import parse_duration
from autoscaler.errors import ConfigError
from autoscaler.secrets import Secret
from tests.factories import config_doc, config_problems

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("30s", 30.0, id="seconds"),
        pytest.param("5m", 300.0, id="minutes"),
        pytest.param("4h", 14400.0, id="hours"),
        pytest.param("1h30m", 5400.0, id="compound"),
        pytest.param("500ms", 0.5, id="millis"),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "m5", "5x", "5m garbage"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_minimal_config_gets_defaults() -> None:
    config = parse_config(config_doc(), env={})
    assert config.poll_interval == 30.0
    assert (config.listen_host, config.listen_port) == ("0.0.0.0", 9464)
    assert config.github.api_url == "https://api.github.com"
    assert config.github.repos is None
    assert config.github.rate_limit_share == 0.8
    assert config.github.proxy is None


def test_the_github_proxy_is_read_and_its_credentials_never_shown() -> None:
    raw = config_doc(github={"owner": "x", "token": "t", "proxy": "${EGRESS}"})
    config = parse_config(raw, env={"EGRESS": "http://user:s3cret-pw@egress.internal:3128"})
    assert config.github.proxy is not None
    assert config.github.proxy.reveal() == "http://user:s3cret-pw@egress.internal:3128"
    assert "s3cret-pw" not in repr(config)
    assert "s3cret-pw" not in str(config.github.proxy)
    assert config.alerts.builtin.github_budget is True
    assert config.runner_types[0].labels == frozenset({"self-hosted", "linux.4xlarge"})


def test_issue_example_keys_work() -> None:
    config = parse_config(
        {
            "poll_interval": "30s",
            "listen": "0.0.0.0:9464",
            "github": {
                "api_url": "https://ghe.example.com/api/v3/",
                "owner": "my-org",
                "repos": ["app", "infra"],
                "token": "${GITHUB_TOKEN}",
            },
            "runner_types": {
                "linux.4xlarge": {"labels": ["self-hosted", "linux.4xlarge"]},
                "linux.g5.4xlarge.nvidia.gpu": {
                    "labels": ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]
                },
            },
        },
        env={"GITHUB_TOKEN": "ghp_fromenv"},
    )
    assert config.github.api_url == "https://ghe.example.com/api/v3"
    assert config.github.repos == ("app", "infra")
    assert config.github.token == Secret("ghp_fromenv")
    assert [rt.name for rt in config.runner_types] == [
        "linux.4xlarge",
        "linux.g5.4xlarge.nvidia.gpu",
    ]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            config_doc(runner_types={"gpu": {"labels": []}}),
            "runner_types.gpu.labels: must be a non-empty list",
            id="empty-labels",
        ),
        pytest.param(
            config_doc(pol_interval="30s"),
            "pol_interval: unknown key (did you mean 'poll_interval'?)",
            id="did-you-mean",
        ),
        pytest.param(
            config_doc(poll_interval="soon"),
            "poll_interval: must be a duration like 30s, 5m or 4h, got 'soon'",
            id="bad-duration",
        ),
        pytest.param(
            config_doc(listen="9464"), "listen: must be HOST:PORT, got '9464'", id="listen"
        ),
        pytest.param(
            config_doc(github={"owner": "x"}), "github: needs either token or app", id="no-auth"
        ),
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "api_url": "ftp://x"}),
            "github.api_url: must be an http(s) URL, got 'ftp://x'",
            id="bad-api-url",
        ),
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "rate_limit_share": 0}),
            "github.rate_limit_share: must be above 0 and at most 1, got 0.0",
            id="rate-limit-share-zero",
        ),
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "rate_limit_share": 1.5}),
            "github.rate_limit_share: must be above 0 and at most 1, got 1.5",
            id="rate-limit-share-over-one",
        ),
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "proxy": "socks5://u:p@proxy:1080"}),
            "github.proxy: must be an http(s) URL, got a 'socks5' URL (the URL is not shown)",
            id="proxy-not-http",
        ),
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "proxy": "http://"}),
            "github.proxy: must be an http(s) URL with a host (the URL is not shown)",
            id="proxy-without-host",
        ),
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "rate_limit_share": "most"}),
            "github.rate_limit_share: must be a number, got a string",
            id="rate-limit-share-not-a-number",
        ),
        pytest.param(
            config_doc(github={"owner": "x", "token": "${NOPE}"}),
            "github.token: environment variable NOPE is not set",
            id="missing-env",
        ),
        pytest.param(
            config_doc(
                runner_types={
                    "a": {"labels": ["x"], "pools": ["p"]},
                    "b": {"labels": ["y"], "pools": ["p"]},
                }
            ),
            "runner_types.b.pools: pool 'p' is already used by runner type 'a'",
            id="shared-pool",
        ),
        pytest.param(
            config_doc(alerts={"receivers": {"oncall": {"type": "email", "url": "https://x"}}}),
            "alerts.receivers.oncall.type: must be one of webhook, slack, pagerduty, "
            "alertmanager, alertmanager_webhook, github_issue, got 'email'",
            id="receiver-type",
        ),
        pytest.param(
            config_doc(
                alerts={
                    "rules": [
                        {
                            "name": "r",
                            "team": "t",
                            "priority": "P9",
                            "description": "d",
                            "receivers": ["nobody"],
                            "max_queue_size": 1,
                        }
                    ]
                }
            ),
            "alerts.rules[0].priority: must be one of P0, P1, P2, P3, P4, got 'P9'",
            id="priority",
        ),
        pytest.param(
            config_doc(
                alerts={
                    "rules": [
                        {"name": "r", "team": "t", "description": "d", "receivers": ["nobody"]}
                    ]
                }
            ),
            "alerts.rules[0]: needs max_queue_size or max_queue_time (or both)",
            id="rule-without-threshold",
        ),
        pytest.param(None, "github: is required", id="empty-file"),
        pytest.param(["a"], "must be a mapping, got a list", id="not-a-mapping"),
    ],
)
def test_each_problem_has_its_path(doc: Any, expected: str) -> None:
    assert expected in config_problems(doc)


def test_all_problems_reported_together() -> None:
    """Every problem at once, each named, in the order of the document (a count alone
    would pass with five wrong messages)."""
    found = config_problems(
        {
            "github": {"owner": "x", "tokn": "a"},
            "runner_types": {"gpu": {"labels": []}, "cpu": {"labels": ["x"], "max": -1}},
            "poll_interval": "never",
        }
    )
    assert found == [
        "github: needs either token or app",
        "github.tokn: unknown key (did you mean 'token'?)",
        "runner_types.gpu.labels: must be a non-empty list",
        "runner_types.cpu.max: must be >= 0, got -1",
        "poll_interval: must be a duration like 30s, 5m or 4h, got 'never'",
    ]


def test_secrets_never_appear_in_messages_or_reprs() -> None:
    secret = "ghp_topsecret"
    config = parse_config(config_doc(github={"owner": "x", "token": secret}), env={})
    assert secret not in repr(config)
    assert secret not in str(config.github.token)
    assert config.github.token is not None and config.github.token.reveal() == secret
    bad = config_doc(github={"owner": "x", "token": secret, "bogus": secret})
    assert all(secret not in p for p in config_problems(bad))


def test_load_config_reports_yaml_syntax_with_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("github:\n  owner: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "not valid YAML: line" in info.value.problems[0]


def test_load_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_example_config_is_valid() -> None:
    config = load_config(REPO / "config.example.yaml", env={"GITHUB_TOKEN": "x"})
    assert len(config.runner_types) == 2
    assert config.runner_types[1].pools == ("ci-gpu-spot", "ci-gpu-ondemand")


@pytest.mark.parametrize(
    "inline",
    [pytest.param({}, id="no-rules-key"), pytest.param({"rules": []}, id="empty-rules")],
)
def test_rule_files_alone_bring_their_rules(inline: dict[str, Any], tmp_path: Path) -> None:
    """A config may name `rule_files` and no `rules`. The rule files' rules join `rules`
    in its validator, which pydantic skipped for a key left out: the rule files' rules
    vanished, silently, from every config without a `rules:` line."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "gpu.yaml").write_text(
        "rules:\n"
        "  - name: GPU jobs queueing\n"
        "    team: infra\n"
        "    description: GPU jobs wait too long\n"
        "    max_queue_time: 30m\n"
        "    receivers: [oncall]\n",
        encoding="utf-8",
    )
    alerts = {
        "rule_files": ["rules/*.yaml"],
        "receivers": {"oncall": {"type": "webhook", "url": "https://hooks.example/x"}},
        "builtin": {"shipped_rules": False},
        **inline,
    }
    config = parse_config(config_doc(alerts=alerts), env={}, base_dir=tmp_path)
    assert [r.name for r in config.alerts.rules] == ["GPU jobs queueing"]


def test_hosted_labels_default_and_override() -> None:
    assert parse_config(config_doc(), env={}).github.hosted_labels == (
        "ubuntu-*",
        "windows-*",
        "macos-*",
    )
    custom = config_doc(github={"owner": "x", "token": "t", "hosted_labels": ["Ubuntu-*"]})
    assert parse_config(custom, env={}).github.hosted_labels == ("ubuntu-*",)


def with_min_idle(min_idle: Any, **extra: Any) -> dict[str, Any]:
    rt = {"labels": ["self-hosted", "linux.4xlarge"], "min_idle": min_idle, **extra}
    return config_doc(runner_types={"cpu": rt})


def test_min_idle_number_and_schedule() -> None:
    plain = parse_config(with_min_idle(2), env={}).runner_types[0].min_idle
    assert (plain.default, plain.schedule) == (2, ())
    window = {"days": ["mon", "Fri"], "from": "08:00", "to": "24:00", "min_idle": 4}
    timed = parse_config(with_min_idle({"default": 1, "schedule": [window]}), env={})
    min_idle = timed.runner_types[0].min_idle
    w = min_idle.schedule[0]
    assert (min_idle.default, w.start, w.end, w.min_idle) == (1, 480, 1440, 4)
    assert w.days == frozenset({0, 4})


MI = "runner_types.cpu.min_idle"
W0 = f"{MI}.schedule[0]"


@pytest.mark.parametrize(
    ("min_idle", "expected"),
    [
        pytest.param(["2"], f"{MI}: must be an integer or a mapping", id="list"),
        pytest.param(-1, f"{MI}: must be >= 0, got -1", id="negative"),
        pytest.param({"default": 1}, f"{MI}.schedule: must be a non-empty list", id="no-windows"),
        pytest.param({"defualt": 1, "schedule": [{}]}, f"{MI}.defualt: unknown key", id="typo"),
        pytest.param(
            {"schedule": [{"days": ["mon", "funday"], "from": "08:00", "to": "18:00"}]},
            f"{W0}.days[1]: must be one of mon, tue, wed, thu, fri, sat, sun, got 'funday'",
            id="bad-day",
        ),
        pytest.param(
            {"schedule": [{"days": [], "from": "08:00", "to": "18:00", "min_idle": 1}]},
            f"{W0}.days: must be a non-empty list",
            id="empty-days",
        ),
        pytest.param(
            {"schedule": [{"from": "25:00", "to": "18:00", "min_idle": 1}]},
            f"{W0}.from: must be a time \"HH:MM\" from 00:00 to 23:59, got '25:00'",
            id="bad-time",
        ),
        pytest.param(
            {"schedule": [{"from": "08:00", "to": 1080, "min_idle": 1}]},
            f'{W0}.to: must be a quoted "HH:MM" string',
            id="unquoted-time-read-as-number",
        ),
        pytest.param(
            {"schedule": [{"from": "08:00", "min_idle": 1}]}, f"{W0}.to: is required", id="no-to"
        ),
        pytest.param(
            {"schedule": [{"from": "08:00", "to": "18:00"}]},
            f"{W0}.min_idle: is required",
            id="no-window-min-idle",
        ),
        pytest.param(
            {"schedule": [{"form": "08:00", "to": "18:00", "min_idle": 1}]},
            f"{W0}.form: unknown key (did you mean 'from'?)",
            id="window-typo",
        ),
        pytest.param(
            {"schedule": [{"from": "08:00", "to": "08:00", "min_idle": 1}]},
            f"{W0}: from and to must differ",
            id="empty-window",
        ),
        pytest.param(
            {"schedule": ["08:00-18:00"]}, f"{W0}: must be a mapping", id="window-not-mapping"
        ),
    ],
)
def test_min_idle_problems_have_their_path(min_idle: Any, expected: str) -> None:
    found = config_problems(with_min_idle(min_idle))
    assert any(p.startswith(expected) for p in found), found


def test_min_idle_schedule_must_not_exceed_max() -> None:
    window = {"from": "08:00", "to": "18:00", "min_idle": 4}
    found = config_problems(with_min_idle({"default": 1, "schedule": [window]}, max=3))
    assert found == [f"{MI}: must not exceed max (3)"]


def test_an_unset_variable_is_one_problem_not_a_cascade() -> None:
    assert config_problems(config_doc(github={"owner": "x", "token": "${GITHUB_TOKEN}"})) == [
        "github.token: environment variable GITHUB_TOKEN is not set"
    ]


def test_state_is_a_file_by_default() -> None:
    assert parse_config(config_doc(), env={}).state.path == "ci-autoscaler-state.db"
    memory = parse_config(config_doc(state={"path": ":memory:"}), env={})
    assert memory.state.path == ":memory:"


def with_slo(slo: Any) -> dict[str, Any]:
    return config_doc(runner_types={"cpu": {"labels": ["self-hosted", "cpu"], "slo": slo}})


def test_slo_is_optional_and_read_as_seconds_and_a_share() -> None:
    assert parse_config(config_doc(), env={}).runner_types[0].slo is None
    slo = parse_config(with_slo({"queue_time": "5m", "objective": 0.95}), env={})
    objective = slo.runner_types[0].slo
    assert objective is not None
    assert (objective.queue_time, objective.objective) == (300.0, 0.95)
    assert objective.error_budget == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("slo", "expected"),
    [
        pytest.param(
            {"queue_time": "5m"}, "runner_types.cpu.slo.objective: is required", id="no-objective"
        ),
        pytest.param(
            {"objective": 0.9}, "runner_types.cpu.slo.queue_time: is required", id="no-time"
        ),
        pytest.param(
            {"queue_time": "5m", "objective": 1},
            "runner_types.cpu.slo.objective: must be between 0 and 1 (exclusive), got 1",
            id="objective-1",
        ),
        pytest.param(
            {"queue_time": "5m", "objective": "ghp_x"},
            "runner_types.cpu.slo.objective: must be a number, got a string",
            id="objective-not-a-number-never-echoed",
        ),
        pytest.param(
            {"queue_time": 300, "objective": 0.9},
            "runner_types.cpu.slo.queue_time: must be a duration like 30s, 5m or 4h, got 300",
            id="bare-number-time-refused",
        ),
        pytest.param(
            {"queue_time": "5m", "objective": "${NOPE}"},
            "runner_types.cpu.slo.objective: environment variable NOPE is not set",
            id="unset-variable-said-once",
        ),
        pytest.param(
            "5m at 95%",
            "runner_types.cpu.slo: must be a mapping, got a string",
            id="not-a-mapping",
        ),
        pytest.param(
            {"queue_time": "0s", "objective": 0.9},
            "runner_types.cpu.slo.queue_time: must be greater than zero",
            id="zero-time",
        ),
        pytest.param(
            {"queue_time": "5m", "objective": 0.9, "window": "30d"},
            "runner_types.cpu.slo.window: unknown key",
            id="unknown-key",
        ),
    ],
)
def test_slo_problems_have_their_path(slo: Any, expected: str) -> None:
    """Each mistake is one problem with its path (no follow-on: a word where the share
    goes is not also 'out of range'; a string where the mapping goes is not also two
    missing keys), and a value is never echoed where it could be a credential."""
    found = config_problems(with_slo(slo))
    assert len(found) == 1 and found[0].startswith(expected), found
    assert "ghp_x" not in found[0]
