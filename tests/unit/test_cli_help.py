"""`ci-autoscaler --help` and each subcommand's help, as a newcomer reads them.

Found in a fresh-clone review: `--config CONFIG`, `--output`, `--log-level`, and the
positional FILE, RUNNER_TYPE and RECEIVER had no help text, so `ci-autoscaler once --help`
did not say what the config file is or where to start one."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.app.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every (command path, parser), the top level included."""
    found: list[tuple[str, argparse.ArgumentParser]] = []
    todo = [("ci-autoscaler", build_parser())]
    while todo:
        name, parser = todo.pop()
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend((f"{name} {sub}", p) for sub, p in action.choices.items())
    return sorted(found, key=lambda item: item[0])


PARSERS = _parsers()


@pytest.mark.parametrize(("name", "parser"), PARSERS, ids=[name for name, _ in PARSERS])
def test_every_argument_says_what_it_is(name: str, parser: argparse.ArgumentParser) -> None:
    silent = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction) and not a.help
    ]
    assert silent == [], f"{name}: arguments without help text: {silent}"


def test_every_command_is_reached() -> None:
    names = {name for name, _ in PARSERS}
    assert {"ci-autoscaler run", "ci-autoscaler state create-table", "ci-autoscaler demo"} <= names


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["once", "--config", "c.yaml"], None),
        (["--log-level", "debug", "once", "--config", "c.yaml"], "debug"),
        (["once", "--log-level", "warning", "--config", "c.yaml"], "warning"),
        (["--log-level", "debug", "demo", "--log-level", "error"], "error"),
        (["state", "create-table", "--config", "c.yaml", "--log-level", "info"], "info"),
    ],
    ids=["none", "before-the-command", "after-the-command", "after-wins", "nested-command"],
)
def test_log_level_is_accepted_before_or_after_the_command(
    argv: list[str], level: str | None
) -> None:
    """Found in a fresh-clone review: `ci-autoscaler once --log-level debug --config X`
    (where a person puts it) was refused as an unrecognized argument; only
    `ci-autoscaler --log-level debug once ...` worked."""
    assert build_parser().parse_args(argv).log_level == level


@pytest.mark.parametrize(
    ("argv", "allowed"),
    [
        (["--help"], ()),
        (["simulate", "--help"], ("autoscaler.sim",)),
        (["check-config", "config.example.yaml"], ("pydantic", "yaml")),
    ],
    ids=["help", "simulate-help", "check-config"],
)
def test_a_command_imports_only_what_it_uses(argv: list[str], allowed: tuple[str, ...]) -> None:
    """`ci-autoscaler --help` took ten times as long as an interpreter that imports
    nothing: the CLI imported the controller, the metrics exposition (and with it
    http.server, wsgiref and email) and the simulator before it parsed an argument.
    Each command now imports what it runs, when it runs."""
    heavy = (
        "pydantic",
        "yaml",
        "boto3",
        "botocore",
        "httpx",
        "msgspec",
        "uvicorn",
        "starlette",
        "prometheus_client",
        "autoscaler.controller",
        "autoscaler.sim",
        "autoscaler.app.served",
        "autoscaler.telemetry",
    )
    probe = (
        "import sys\n"
        "from autoscaler.app.entry import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env={**os.environ, "GITHUB_TOKEN": "x"},
        capture_output=True,
        text=True,
        check=True,
    )
    modules = done.stderr.split()
    loaded = [h for h in heavy if any(m == h or m.startswith(h + ".") for m in modules)]
    assert loaded == list(allowed)
