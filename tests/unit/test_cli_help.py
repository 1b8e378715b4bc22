"""`ci-autoscaler --help` and each subcommand's help, as a newcomer reads them.

Found in a fresh-clone review: `--config CONFIG`, `--output`, `--log-level`, and the
positional FILE, RUNNER_TYPE and RECEIVER had no help text, so `ci-autoscaler once --help`
did not say what the config file is or where to start one."""

from __future__ import annotations

import argparse

import pytest

from autoscaler.app.cli import build_parser


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
