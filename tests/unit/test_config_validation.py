"""Config that must be refused, and how it is told.

Each table row is a value the controller accepted before: a zero timeout, a back-off
that starts above its cap, a poll interval of eleven years, two runner types no job can
tell apart, a receiver URL that reads a local file, a key given twice with the last one
silently winning, a secret echoed back in an error message.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from autoscaler.config import ReceiverConfig, load_config, parse_config, read_config
from autoscaler.errors import ConfigError
from tests.factories import config_doc, config_problems

GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
PAT = "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789ABCDEFG"
AKIA = "AKIAIOSFODNN7EXAMPLE"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n"
    "-----END RSA PRIVATE KEY-----"
)
ENTROPY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
USERINFO_URL = "https://bot:hunter2@hooks.example.com/x"
SLACK = "https://hooks.slack.com/services/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"


def rule(**kw: Any) -> dict[str, Any]:
    base = {"name": "r", "team": "t", "description": "d", "receivers": ["hook"]}
    return {**base, "max_queue_size": 1, **kw}


HOOK = {"hook": {"type": "webhook", "url": "https://hooks.example.com/x"}}


# --- item 13: values that must be refused ------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "timeout": "0s"}),
            ["github.timeout: must be greater than zero"],
            id="github-timeout-0s",
        ),
        pytest.param(
            config_doc(aws={"retry": {"deadline": "0s"}}),
            ["aws.retry.deadline: must be greater than zero"],
            id="aws-retry-deadline-0s",
        ),
        pytest.param(
            config_doc(alerts={"rules": [rule(repeat_interval="0s")], "receivers": HOOK}),
            ["alerts.rules[0].repeat_interval: must be greater than zero"],
            id="repeat-interval-0s",
        ),
        pytest.param(
            config_doc(
                alerts={"receivers": {"hook": {**HOOK["hook"], "timeout": "0s"}}},
            ),
            ["alerts.receivers.hook.timeout: must be greater than zero"],
            id="receiver-timeout-0s",
        ),
        pytest.param(
            config_doc(poll_interval="0s"),
            ["poll_interval: must be greater than zero"],
            id="poll-interval-0s",
        ),
        pytest.param(
            config_doc(poll_interval="100000h"),
            ["poll_interval: must be at most 1h, got 100000h"],
            id="poll-interval-100000h",
        ),
        pytest.param(
            config_doc(runner_types={"cpu": {"labels": ["x"], "idle_timeout": "400d"}}),
            ["runner_types.cpu.idle_timeout: must be at most 365d, got 400d"],
            id="any-duration-above-365d",
        ),
        pytest.param(
            config_doc(scaling={"capacity_backoff_initial": "1h", "capacity_backoff_max": "30m"}),
            [
                "scaling.capacity_backoff_initial: must not exceed capacity_backoff_max (30m), "
                "got 1h"
            ],
            id="capacity-backoff-initial-above-max",
        ),
        pytest.param(
            config_doc(aws={"retry": {"initial_backoff": "10s", "max_backoff": "2s"}}),
            ["aws.retry.initial_backoff: must not exceed max_backoff (2s), got 10s"],
            id="retry-initial-backoff-above-max",
        ),
        pytest.param(
            config_doc(aws={"retry": {"initial_backoff": "10s"}}),
            ["aws.retry.initial_backoff: must not exceed max_backoff (8s), got 10s"],
            id="retry-initial-backoff-above-default-max",
        ),
        pytest.param(
            config_doc(
                runner_types={
                    "a": {"labels": ["self-hosted", "GPU"]},
                    "b": {"labels": ["gpu", "self-hosted"]},
                }
            ),
            [
                "runner_types.b.labels: same labels as runner type 'a': a job could not "
                "tell the two apart (give each type a label of its own)"
            ],
            id="identical-label-sets",
        ),
        pytest.param(
            config_doc(
                alerts={"receivers": {"hook": {"type": "webhook", "url": "file:///etc/passwd"}}}
            ),
            [
                "alerts.receivers.hook.url: must be an http(s) URL, got a 'file' URL "
                "(the URL is not shown)"
            ],
            id="receiver-url-file",
        ),
        pytest.param(
            config_doc(alerts={"receivers": {"hook": {"type": "slack", "url": "not-a-url"}}}),
            [
                "alerts.receivers.hook.url: must be an http(s) URL, got no http(s):// scheme "
                "(the URL is not shown)"
            ],
            id="receiver-url-not-a-url",
        ),
        pytest.param(
            config_doc(alerts={"receivers": {"hook": {"type": "webhook", "url": "https:///x"}}}),
            [
                "alerts.receivers.hook.url: must be an http(s) URL with a host "
                "(the URL is not shown)"
            ],
            id="receiver-url-without-host",
        ),
    ],
)
def test_refused(doc: dict[str, Any], expected: list[str]) -> None:
    assert config_problems(doc) == expected


def test_different_label_sets_and_good_urls_pass() -> None:
    config = parse_config(
        config_doc(
            runner_types={"a": {"labels": ["self-hosted", "gpu"]}, "b": {"labels": ["gpu"]}},
            alerts={"receivers": {"slack": {"type": "slack", "url": SLACK}}},
        ),
        env={},
    )
    url = config.alerts.receivers["slack"].url
    assert url is not None and url.reveal() == SLACK


# --- item 13: one duration grammar, the same for every key -------------------------------


def _at(*path: str) -> Callable[[Any], dict[str, Any]]:
    """A document with ``value`` at ``path`` (and what that key needs around it: a rule,
    a receiver, a capacity back-off that starts below any cap)."""

    def build(value: Any) -> dict[str, Any]:
        doc = config_doc(
            alerts={"rules": [rule()], "receivers": HOOK},
            scaling={"capacity_backoff_initial": "100ms"},
        )
        node = doc
        for key in path[:-1]:
            node = node.setdefault(key, {}) if not key.isdigit() else node[int(key)]  # type: ignore[index]
        node[path[-1]] = value
        return doc

    return build


DURATION_KEYS = [
    pytest.param(_at("github", "timeout"), "github.timeout", id="github.timeout"),
    pytest.param(
        _at("aws", "retry", "max_backoff"), "aws.retry.max_backoff", id="retry.max_backoff"
    ),
    pytest.param(
        _at("runner_types", "cpu", "idle_timeout"),
        "runner_types.cpu.idle_timeout",
        id="idle_timeout",
    ),
    pytest.param(
        _at("scaling", "capacity_backoff_max"),
        "scaling.capacity_backoff_max",
        id="capacity_backoff_max",
    ),
    pytest.param(
        _at("alerts", "rules", "0", "repeat_interval"),
        "alerts.rules[0].repeat_interval",
        id="repeat_interval",
    ),
    pytest.param(
        _at("alerts", "builtin", "github_unreachable_after"),
        "alerts.builtin.github_unreachable_after",
        id="github_unreachable_after",
    ),
]


@pytest.mark.parametrize(("build", "path"), DURATION_KEYS)
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("30s", 30.0, id="30s"),
        pytest.param("5m", 300.0, id="5m"),
        pytest.param("1h30m", 5400.0, id="1h30m"),
        pytest.param("1.5h", 5400.0, id="1.5h"),
        pytest.param("1d", 86400.0, id="1d"),
        pytest.param("500ms", 0.5, id="500ms"),
        pytest.param("1m30s500ms", 90.5, id="three-units"),
    ],
)
def test_durations_accepted_everywhere(
    build: Callable[[Any], dict[str, Any]], path: str, text: str, seconds: float
) -> None:
    config = parse_config(build(text), env={})
    value: Any = {
        "github.timeout": config.github.timeout,
        "aws.retry.max_backoff": config.aws.retry.max_backoff,
        "runner_types.cpu.idle_timeout": config.runner_types[0].idle_timeout,
        "scaling.capacity_backoff_max": config.scaling.capacity_backoff_max,
        "alerts.rules[0].repeat_interval": config.alerts.rules[-1].repeat_interval,
        "alerts.builtin.github_unreachable_after": config.alerts.builtin.github_unreachable_after,
    }[path]
    assert value == seconds


HINT = "must be a duration like 30s, 5m or 4h, got"
BARE = "a bare number has no unit (write {n}s for seconds, {n}m for minutes)"
ORDER = "units go largest first, each once (1h30m, not 30m1h)"


@pytest.mark.parametrize(("build", "path"), DURATION_KEYS)
@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(30, f"{HINT} 30: {BARE.format(n=30)}", id="int"),
        pytest.param("90", f"{HINT} '90': {BARE.format(n=90)}", id="numeric-string"),
        pytest.param(1.5, f"{HINT} 1.5: {BARE.format(n=1.5)}", id="float"),
        pytest.param(0, f"{HINT} 0: {BARE.format(n=0)}", id="zero"),
        pytest.param("30m1h", f"{HINT} '30m1h': {ORDER}", id="units-out-of-order"),
        pytest.param("1h1h", f"{HINT} '1h1h': {ORDER}", id="unit-twice"),
        pytest.param("-5s", f"{HINT} '-5s'", id="negative"),
        pytest.param("5 m", f"{HINT} '5 m'", id="space"),
        pytest.param("soon", f"{HINT} 'soon'", id="word"),
        pytest.param(True, "must be a duration like 30s, 5m or 4h, got a boolean", id="bool"),
    ],
)
def test_durations_refused_everywhere(
    build: Callable[[Any], dict[str, Any]], path: str, value: Any, message: str
) -> None:
    assert config_problems(build(value)) == [f"{path}: {message}"]


# --- item 10: a credential under the wrong key is never echoed ---------------------------


@pytest.mark.parametrize(
    ("doc", "env", "expected"),
    [
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "timeout": GHP}),
            {},
            "github.timeout: must be a duration like 30s, 5m or 4h, "
            "got a value that looks like a credential (not shown)",
            id="github-token-as-timeout",
        ),
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "timeout": "${TOKEN}"}),
            {"TOKEN": GHP},
            "github.timeout: must be a duration like 30s, 5m or 4h, "
            "got a value that looks like a credential (not shown)",
            id="github-token-via-env",
        ),
        pytest.param(
            config_doc(poll_interval=PAT),
            {},
            "poll_interval: must be a duration like 30s, 5m or 4h, "
            "got a value that looks like a credential (not shown)",
            id="fine-grained-pat",
        ),
        pytest.param(
            config_doc(log_level=AKIA),
            {},
            "log_level: must be one of debug, info, warning, error, "
            "got a value that looks like a credential (not shown)",
            id="aws-key-id-as-log-level",
        ),
        pytest.param(
            config_doc(listen=PEM),
            {},
            "listen: must be HOST:PORT, got a value that looks like a credential (not shown)",
            id="pem-as-listen",
        ),
        pytest.param(
            config_doc(scaling={"capacity_backoff_max": ENTROPY}),
            {},
            "scaling.capacity_backoff_max: must be a duration like 30s, 5m or 4h, "
            "got a value that looks like a credential (not shown)",
            id="high-entropy",
        ),
        pytest.param(
            config_doc(
                github={"owner": "x", "token": "t", "api_url": "ftp://u:pw@ghe.example.com/x"}
            ),
            {},
            "github.api_url: must be an http(s) URL, got 'ftp://ghe.example.com/...'",
            id="userinfo-url",
        ),
        pytest.param(
            config_doc(alerts={"receivers": {"hook": {"type": SLACK, "url": SLACK}}}),
            {},
            "alerts.receivers.hook.type: must be one of webhook, slack, pagerduty, alertmanager, "
            "alertmanager_webhook, github_issue, got 'https://hooks.slack.com/...'",
            id="slack-url-as-type",
        ),
        pytest.param(
            config_doc(**{GHP: "oops"}),
            {},
            "<redacted>: unknown key",
            id="token-pasted-as-a-key",
        ),
        pytest.param(
            config_doc(
                alerts={"receivers": {"hook": {"type": "webhook", "url": f"gopher://{GHP}@x"}}}
            ),
            {},
            "alerts.receivers.hook.url: must be an http(s) URL, got a 'gopher' URL "
            "(the URL is not shown)",
            id="receiver-url-never-echoed",
        ),
    ],
)
def test_a_credential_is_never_echoed(
    doc: dict[str, Any], env: dict[str, str], expected: str
) -> None:
    """Story: a token pasted under ``github.timeout`` came back in the error, in full."""
    found = config_problems(doc, env)
    assert expected in found
    text = "\n".join(found)
    for secret in (
        GHP,
        PAT,
        AKIA,
        "MIIEowIBAAKCAQEA",
        ENTROPY,
        "hunter2",
        ":pw@",
        "cQk3Nf8s1aWxY7pLmZ2rT9vE",
    ):
        assert secret not in text


def test_repr_of_a_config_shows_no_receiver_url_path() -> None:
    """Story: ``repr(config)`` printed the Slack webhook URL, whose path is its key."""
    config = parse_config(
        config_doc(
            alerts={
                "receivers": {
                    "slack": {"type": "slack", "url": SLACK},
                    "hook": {"type": "webhook", "url": USERINFO_URL},
                }
            }
        ),
        env={},
    )
    text = repr(config) + str(config)
    assert "cQk3Nf8s1aWxY7pLmZ2rT9vE" not in text and "T0AAAAAAA" not in text
    assert "hunter2" not in text and "bot:" not in text
    assert "SecretUrl('https://hooks.slack.com/...')" in text
    assert "SecretUrl('https://hooks.example.com/...')" in text


def test_a_dump_of_a_config_holds_no_secret() -> None:
    """A config dumped to JSON (what a debug line would print) shows no credential."""
    config = parse_config(
        config_doc(
            github={"owner": "x", "token": GHP, "proxy": USERINFO_URL},
            webhook={"secret": ENTROPY},
            alerts={"receivers": {"slack": {"type": "slack", "url": SLACK}}},
        ),
        env={},
    )
    dumped = config.model_dump_json()
    for secret in (GHP, ENTROPY, "hunter2", "cQk3Nf8s1aWxY7pLmZ2rT9vE"):
        assert secret not in dumped


def test_a_config_built_in_code_never_shows_a_bad_secret_in_its_error() -> None:
    """pydantic's own error text quotes the value it refused; these models hide it."""
    with pytest.raises(ValidationError) as info:
        ReceiverConfig(name="hook", type="webhook", url=f"gopher://{GHP}@x", token=[GHP])
    text = str(info.value)
    assert "must be an http(s) URL" in text and "the value is not shown" in text
    assert GHP not in text


# --- item 13: duplicate keys; item 14: not UTF-8 ------------------------------------------


GOOD = """\
github:
  owner: my-org
  token: t
runner_types:
  cpu:
    labels: [self-hosted, linux.4xlarge]
"""


def load_problems(tmp_path: Path, text: str | bytes, name: str = "c.yaml") -> list[str]:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    return info.value.problems


DUP = (
    "duplicate key (first on line {}); YAML would silently keep only the last one: "
    "remove one of them"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "poll_interval: 30s\n" + GOOD + "poll_interval: 1h\n",
            [f"line 8: poll_interval: {DUP.format(1)}"],
            id="top-level",
        ),
        pytest.param(
            GOOD + "    max: 4\n    max: 40\n",
            [f"line 8: runner_types.cpu.max: {DUP.format(7)}"],
            id="nested",
        ),
        pytest.param(
            GOOD.replace("  token: t\n", "  token: t\n  token: u\n"),
            [f"line 4: github.token: {DUP.format(3)}"],
            id="secret-key-twice-value-not-shown",
        ),
        pytest.param(
            "github: {owner: a, owner: b, token: t}\n"
            + GOOD.split("runner_types:\n")[1].join(["runner_types:\n", ""]),
            [f"line 1: github.owner: {DUP.format(1)}"],
            id="flow-mapping",
        ),
    ],
)
def test_duplicate_keys_are_refused(tmp_path: Path, text: str, expected: list[str]) -> None:
    """Story: ``poll_interval`` given twice, 200 lines apart: the last silently won."""
    assert load_problems(tmp_path, text) == expected


def test_a_merge_key_override_is_not_a_duplicate(tmp_path: Path) -> None:
    text = GOOD + "    idle_timeout: 1m\n  gpu:\n    labels: [gpu]\n    idle_timeout: 2m\n"
    anchors = text.replace("  cpu:\n", "  cpu: &base\n").replace(
        "  gpu:\n    labels: [gpu]\n", "  gpu:\n    <<: *base\n    labels: [gpu]\n"
    )
    path = tmp_path / "c.yaml"
    path.write_text(anchors)
    config = load_config(path, env={})
    assert [rt.idle_timeout for rt in config.runner_types] == [60.0, 120.0]


def test_duplicate_keys_in_a_rule_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(
        "rules:\n  - name: r\n    team: t\n    team: u\n    description: d\n"
        "    receivers: [hook]\n    max_queue_size: 1\n"
    )
    text = (
        GOOD
        + "alerts:\n  rule_files: [rules.yaml]\n  receivers:\n    hook: {type: webhook, url: 'https://h'}\n"
    )
    found = load_problems(tmp_path, text)
    assert found == [f"{tmp_path / 'rules.yaml'}: line 4: rules[0].team: {DUP.format(3)}"]


def test_a_problem_in_a_rule_file_has_its_line_in_that_file(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(
        "rules:\n  - name: r\n    team: t\n    description: d\n    receivers: [hook]\n"
        "    max_queue_size: 1\n    for: 5\n"
    )
    text = (
        GOOD
        + "alerts:\n  rule_files: [rules.yaml]\n  receivers:\n    hook: {type: webhook, url: 'https://h'}\n"
    )
    assert load_problems(tmp_path, text) == [
        f"{tmp_path / 'rules.yaml'}: line 7: rules[0].for: must be a duration like 30s, 5m or "
        "4h, got 5: a bare number has no unit (write 5s for seconds, 5m for minutes)"
    ]


def test_a_config_file_that_is_not_utf8_is_one_message(tmp_path: Path) -> None:
    """Story: a Latin-1 file (``team: Équipe``) ended in a UnicodeDecodeError traceback."""
    text = GOOD.encode() + "alerts:\n  builtin:\n    team: \u00c9quipe\n".encode("latin-1")
    found = load_problems(tmp_path, text)
    assert found == [
        f"{tmp_path / 'c.yaml'}: not UTF-8 text (byte 0xc9 on line 9): save the file as UTF-8"
    ]


def test_a_rule_file_that_is_not_utf8_is_one_problem(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_bytes(b"rules:\n  - name: caf\xe9\n")
    text = GOOD + "alerts:\n  rule_files: [rules.yaml]\n"
    found = load_problems(tmp_path, text)
    assert found == [
        f"{tmp_path / 'rules.yaml'}: cannot read rules: not UTF-8 text (byte 0xe9 on line 2): "
        "save the file as UTF-8"
    ]


def test_a_private_key_file_that_is_not_utf8_is_one_problem(tmp_path: Path) -> None:
    (tmp_path / "key.pem").write_bytes(b"\xff\xfe\x00binary")
    text = GOOD.replace(
        "  token: t\n", "  app: {app_id: 1, installation_id: 2, private_key_file: key.pem}\n"
    )
    assert load_problems(tmp_path, text) == [
        "line 3: github.app.private_key_file: is not UTF-8 text (a PEM key is ASCII)"
    ]


def test_a_utf8_byte_order_mark_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert load_config(path, env={}).github.owner == "my-org"


def test_deep_nesting_is_one_message(tmp_path: Path) -> None:
    """libyaml says where it gave up (``line 1, column 1003: exceeded maximum nesting
    depth``); PyYAML's own parser, where libyaml is missing, that it did."""
    [found] = load_problems(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")
    assert found.startswith(f"{tmp_path / 'c.yaml'}: not valid YAML: ")
    assert "nesting depth" in found or "nested too deeply" in found


# --- item 16: one message per mistake, in file order, with lines --------------------------


def test_an_invalid_max_is_not_blamed_again_through_min_idle() -> None:
    """Story: ``max: -3`` also said ``min_idle: must not exceed max (0)``, about the 0 that
    replaced the bad value."""
    doc = config_doc(runner_types={"cpu": {"labels": ["x"], "max": -3, "min_idle": 2}})
    assert config_problems(doc) == ["runner_types.cpu.max: must be >= 0, got -3"]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            config_doc(github={"owner": "x", "token": "t", "api_url": "${GHE_URL}"}),
            ["github.api_url: environment variable GHE_URL is not set"],
            id="unset-api-url",
        ),
        pytest.param(
            config_doc(github={"owner": "${ORG}", "token": "t"}),
            ["github.owner: environment variable ORG is not set"],
            id="unset-required-string",
        ),
        pytest.param(
            config_doc(alerts={"receivers": {"hook": {"type": "slack", "url": "${SLACK_URL}"}}}),
            ["alerts.receivers.hook.url: environment variable SLACK_URL is not set"],
            id="unset-receiver-url",
        ),
        pytest.param(
            config_doc(github={"owner": "x", "token": "${A}${A}"}),
            ["github.token: environment variable A is not set"],
            id="same-variable-twice",
        ),
        pytest.param(
            config_doc(scaling={"capacity_backoff_initial": "soon", "capacity_backoff_max": "1s"}),
            ["scaling.capacity_backoff_initial: must be a duration like 30s, 5m or 4h, got 'soon'"],
            id="bad-backoff-not-compared",
        ),
        pytest.param(
            config_doc(
                runner_types={"a": {"labels": ["x", 3]}, "b": {"labels": ["x"]}},
            ),
            ["runner_types.a.labels[1]: must be a non-empty string"],
            id="bad-labels-not-compared",
        ),
    ],
)
def test_no_follow_on_problems(doc: dict[str, Any], expected: list[str]) -> None:
    assert config_problems(doc) == expected


def test_problems_come_in_file_order_with_their_lines(tmp_path: Path) -> None:
    """Story: problems came in the order the reader happened to visit sections (aws before
    github, rules after receivers); a person fixes a file top to bottom."""
    text = """\
poll_interval: 30
aws:
  retry:
    deadline: 0s
github:
  owner: my-org
  tokn: t
runner_types:
  cpu:
    labels: []
    max: -3
    min_idle: 2
log_level: loud
"""
    assert load_problems(tmp_path, text) == [
        "line 1: poll_interval: must be a duration like 30s, 5m or 4h, got 30: "
        "a bare number has no unit (write 30s for seconds, 30m for minutes)",
        "line 4: aws.retry.deadline: must be greater than zero",
        "line 5: github: needs either token or app",
        "line 7: github.tokn: unknown key (did you mean 'token'?)",
        "line 10: runner_types.cpu.labels: must be a non-empty list",
        "line 11: runner_types.cpu.max: must be >= 0, got -3",
        "line 13: log_level: must be one of debug, info, warning, error, got 'loud'",
    ]


def test_missing_sections_come_first() -> None:
    assert config_problems({"poll_interval": "soon"}) == [
        "github: is required",
        "runner_types: is required (at least one runner type)",
        "poll_interval: must be a duration like 30s, 5m or 4h, got 'soon'",
    ]


def test_allowed_unset_variables_leave_a_config_whatever_the_key_holds(tmp_path: Path) -> None:
    """``check-config --allow-unset-env`` on a machine without the deployment's secrets:
    text keeps what was written, anything else its default, and nothing more is said."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "github:\n  owner: x\n  token: ${T}\n  api_url: ${U}\n"
        "runner_types:\n  a:\n    labels: [x]\n    max: ${M}\n"
        "log_level: ${L}\npoll_interval: ${P}\n"
        "alerts:\n  receivers:\n    s:\n      type: slack\n      url: ${S}\n"
    )
    loaded = read_config(path, env={}, allow_unset_env=True)
    assert [w.split(":")[0] for w in loaded.warnings] == [
        "github.token",
        "github.api_url",
        "runner_types.a.max",
        "log_level",
        "poll_interval",
        "alerts.receivers.s.url",
    ]
    config = loaded.config
    assert (config.poll_interval, config.log_level, config.runner_types[0].max) == (
        30.0,
        "info",
        None,
    )
    path.write_text("github: {owner: x, token: t}\nrunner_types: ${TYPES}\n")
    with pytest.raises(ConfigError) as info:  # no config without its runner types: said
        read_config(path, env={}, allow_unset_env=True)
    assert info.value.problems == ["line 2: runner_types: must be a mapping, got a string"]
