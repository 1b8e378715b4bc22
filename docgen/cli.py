"""The command line reference: every command and option, from the CLI's own parser.

Rendered from the parser's actions rather than argparse's help text, whose layout
changes between Python versions and terminal widths.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from autoscaler.app.cli import build_parser
from docgen.markdown import GENERATED, cell, code, table


def _subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(help, parser) of each direct subcommand, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, child in action.choices.items():
                yield helps.get(name, ""), child


def _flag(action: argparse.Action) -> str:
    """``--output {table,json}``, ``--config CONFIG``, ``FILE``: as argparse's usage."""
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if action.choices is not None and not isinstance(action.choices, dict):
        metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
    if not action.option_strings:
        return code(metavar)
    names = ", ".join(action.option_strings)
    return code(names if action.nargs == 0 else f"{names} {metavar}")


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return ""
    return code(str(action.default))


def _options(parser: argparse.ArgumentParser, everywhere: frozenset[str]) -> list[list[str]]:
    """One row per argument, leaving out ``--help`` and the options of every command."""
    return [
        [cell(_flag(a)), cell(a.help or ""), _default(a)]
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)
        and a.help != argparse.SUPPRESS
        and a.dest not in everywhere
    ]


def _commands(
    parser: argparse.ArgumentParser, prefix: str, everywhere: frozenset[str]
) -> Iterator[str]:
    for help_text, child in _subcommands(parser):
        name = f"{prefix} {child.prog.rsplit(' ', 1)[-1]}"
        nested = list(_subcommands(child))
        yield f"## `{name}`"
        yield ""
        yield cell(help_text[:1].upper() + help_text[1:]) + "."
        rows = _options(child, everywhere)
        if rows and not nested:
            yield ""
            yield table(["Argument", "Meaning", "Default"], rows)
        yield ""
        if nested:
            yield from _commands(child, name, everywhere)


def render() -> str:
    parser = build_parser()
    parts = [
        "# Command line reference",
        "",
        GENERATED.format(source="autoscaler.app.cli.build_parser"),
        "",
        "`ci-autoscaler COMMAND [OPTIONS]`; `python -m autoscaler` is the same program.",
        "",
        "## Options of every command",
        "",
        table(["Argument", "Meaning", "Default"], _options(parser, frozenset())),
        "",
        "`--log-level` may also follow the command.",
        "",
    ]
    everywhere = frozenset(a.dest for a in parser._actions if a.option_strings)
    parts += list(_commands(parser, "ci-autoscaler", everywhere))
    return "\n".join(parts).rstrip("\n") + "\n"
