"""The CLI broken on purpose, as a newcomer breaks it: every mistake gets one short screen
that names the file or key and what to do, a non-zero exit code, no traceback and no
secret. One row per mistake; a new one is one more row."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.e2e.harness import cli, free_port, wait_for, write_config

SECRET = "ghp_" + "Zq7" * 12  # looks like a GitHub token: must never be echoed
SCREEN = 24  # lines: what a newcomer reads without scrolling

GOOD = {
    "github": {"owner": "my-org", "token": SECRET},
    "runner_types": {"linux.4xlarge": {"labels": ["self-hosted", "linux.4xlarge"]}},
}


def _with(**changes: object) -> str:
    doc = {**GOOD, **changes}
    return yaml.safe_dump(doc)


# (id, file body or None for no file, command, what stderr must say)
CONFIG_MISTAKES = [
    ("missing-file", None, ["check-config"], "cannot read: No such file or directory"),
    ("missing-file-once", None, ["once", "--config"], "cannot read: No such file or directory"),
    ("empty-file", "", ["check-config"], "the file is empty: start from config.example.yaml"),
    ("invalid-yaml", "github: [owner\n", ["check-config"], "not valid YAML: line 2"),
    (
        "wrong-type",
        _with(github={"owner": "my-org", "token": SECRET, "max_concurrency": "lots"}),
        ["check-config"],
        "github.max_concurrency: must be an integer, got a string",
    ),
    (
        "unknown-key-holding-a-secret",
        _with(github={"owner": "my-org", "tokne": SECRET}),
        ["check-config"],
        "github.tokne: unknown key (did you mean 'token'?)",
    ),
    (
        "unset-env",
        _with(github={"owner": "my-org", "token": "${NEWCOMER_UNSET_TOKEN}"}),
        ["run", "--config"],
        "github.token: environment variable NEWCOMER_UNSET_TOKEN is not set",
    ),
    (
        "bare-number-duration",
        _with(poll_interval=30),
        ["check-config"],
        "poll_interval: must be a duration like 30s, 5m or 4h, got 30: a bare number",
    ),
    (
        "duration-with-a-space",
        _with(poll_interval="30 s"),
        ["check-config"],
        "poll_interval: must be a duration like 30s, 5m or 4h, got '30 s'",
    ),
    (
        "state-create-table-on-sqlite",
        _with(),
        ["state", "create-table", "--config"],
        "state.backend is sqlite: there is no table to create",
    ),
    (
        "explain-an-unknown-runner-type",
        _with(),
        ["explain", "linux.nope", "--config"],
        "unknown runner type 'linux.nope' (configured: linux.4xlarge)",
    ),
]


#: Rows whose mistake is in the arguments (usage, exit 2), not in the file (exit 1).
USAGE_MISTAKES = {"explain-an-unknown-runner-type"}


def _short_and_clean(result: subprocess.CompletedProcess[str]) -> None:
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "Traceback" not in out, out
    assert SECRET not in out
    assert len(result.stderr.splitlines()) <= SCREEN, result.stderr


@pytest.mark.parametrize(
    ("body", "command", "says", "code"),
    [
        pytest.param(*row[1:], 2 if row[0] in USAGE_MISTAKES else 1, id=row[0])
        for row in CONFIG_MISTAKES
    ],
)
def test_a_config_mistake_is_one_clear_screen(
    tmp_path: Path, body: str | None, command: list[str], says: str, code: int
) -> None:
    path = tmp_path / "config.yaml"
    if body is not None:
        path.write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "NEWCOMER_UNSET_TOKEN"}
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler", *command, str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    _short_and_clean(result)
    assert result.returncode == code
    assert says in result.stderr
    assert result.stdout == ""


def test_run_on_a_port_already_in_use_says_which_key_to_change(tmp_path: Path) -> None:
    """Before: `run` with `listen` on a port another process holds ended in an OSError
    traceback from socket.create_server, after opening the state store. Now one line
    names the file, the key and the fix, and the exit code is 1."""
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        config = write_config(tmp_path, "http://127.0.0.1:9", port)
        result = cli("run", "--config", str(config), timeout=60)
    finally:
        taken.close()
    _short_and_clean(result)
    assert result.returncode == 1
    assert f"{config}: listen: cannot serve /metrics on 127.0.0.1:{port}" in result.stderr
    assert "set listen to a free port" in result.stderr


def _hanging_github() -> socket.socket:
    """A GitHub that accepts connections and never answers: every request hangs until
    its timeout."""
    return socket.create_server(("127.0.0.1", 0), backlog=64)


def _first_request(github: socket.socket) -> None:
    """Wait (30 s at most) until the controller connects: its tick is under way."""
    github.settimeout(30)
    conn, _ = github.accept()
    conn.close()  # an answerless close: the client sees a transient error and goes on


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("command", [["once"], ["explain"]], ids=["once", "explain"])
def test_ctrl_c_during_a_tick_exits_130_without_a_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    """Before: Ctrl-C while `once` or `explain` waited on GitHub (or while `run` was still
    loading its state) printed a KeyboardInterrupt traceback. Now `interrupted` and 130,
    the shell's code for SIGINT."""
    github = _hanging_github()
    try:
        url = f"http://127.0.0.1:{github.getsockname()[1]}"
        config = write_config(tmp_path, url, free_port())
        proc = subprocess.Popen(
            [sys.executable, "-m", "autoscaler", *command, "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "E2E_TOKEN": "e2e-token"},
        )
        _first_request(github)  # the tick is waiting on the silent GitHub
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        github.close()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    _short_and_clean(result)
    assert proc.returncode == 130
    assert err.rstrip().endswith("interrupted")


def test_sigint_stops_run_promptly_while_github_hangs(tmp_path: Path) -> None:
    """Before: Ctrl-C on `run` while GitHub did not answer logged "received SIGINT,
    stopping" and then waited 15 s: closing the poll's workers joined each thread for up
    to 5 s, one after another, each stuck in a read. Now they share one 2 s deadline."""
    github = _hanging_github()
    try:
        url = f"http://127.0.0.1:{github.getsockname()[1]}"
        config = write_config(tmp_path, url, free_port())
        proc = subprocess.Popen(
            [sys.executable, "-m", "autoscaler", "run", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "E2E_TOKEN": "e2e-token"},
        )
        port = int(yaml.safe_load(config.read_text())["listen"].rsplit(":", 1)[1])
        wait_for(lambda: _healthy(port), 30, "run's /healthz")  # its signal handler is in
        _first_request(github)  # and its first tick waits on the silent GitHub
        asked = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        took = time.monotonic() - asked
    finally:
        github.close()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "received SIGINT, stopping" in err
    assert took < 8, f"stopping took {took:.1f}s"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--tick", "0"], "argument --tick: must be more than 0 seconds, got 0"),
        (["--duration", "-5"], "argument --duration: must be more than 0 seconds, got -5"),
        (["--tick", "x"], "argument --tick: 'x' is not a number of seconds"),
        (["--listen", "abc"], "argument --listen: 'abc': expected HOST:PORT"),
        (["--listen", "127.0.0.1:99999"], "'127.0.0.1:99999': expected HOST:PORT"),
    ],
    ids=["tick-zero", "negative-duration", "tick-not-a-number", "listen-no-port", "port-too-big"],
)
def test_demo_arguments_are_checked_before_anything_starts(args: list[str], says: str) -> None:
    """Before: `demo --tick 0` ended in a ConfigError traceback (poll_interval must be
    greater than zero), `--listen abc` in a ValueError from int() and `--listen :99999` in
    an OverflowError from bind(), each after the fake GitHub and moto had started. Now
    argparse refuses them with the usage line, exit 2."""
    result = cli("demo", *args, timeout=60)
    _short_and_clean(result)
    assert result.returncode == 2
    assert says in result.stderr


NO_AWS_CREDENTIALS = {
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {**NO_AWS_CREDENTIALS, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""},
            "no AWS credentials were found, or they may not create it. Creating it needs "
            "dynamodb:CreateTable",
        ),
        (
            {**NO_AWS_CREDENTIALS, "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
            "DynamoDB did not answer (unreachable). Check aws.region and aws.endpoint_url",
        ),
    ],
    ids=["no-credentials", "endpoint-unreachable"],
)
def test_state_create_table_failures_speak_to_the_person_creating_it(
    tmp_path: Path, env: dict[str, str], says: str
) -> None:
    """Before: without credentials `state create-table` said "the controller's role needs
    dynamodb:ConditionCheckItem, DeleteItem, ... on this table" (the running controller's
    list, without CreateTable), and with DynamoDB unreachable "CreateTable failed
    (ConnectionError); retried at the next step", though the command had already given
    up. Both now say what creating the table needs."""
    config = tmp_path / "config.yaml"
    doc = {
        **GOOD,
        "state": {"backend": "dynamodb", "table": "ci-autoscaler-state"},
        "aws": {"region": "us-east-1", "endpoint_url": "http://127.0.0.1:9"},
    }
    config.write_text(yaml.safe_dump(doc))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    blank = [k for k, v in env.items() if v == ""]
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler", "state", "create-table", "--config", str(config)],
        env={**clean, **{k: v for k, v in env.items() if k not in blank}},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    _short_and_clean(result)
    assert result.returncode == 1
    assert f"{config}: cannot create dynamodb table ci-autoscaler-state" in result.stderr
    assert says in result.stderr
    assert "retried at the next step" not in result.stderr
