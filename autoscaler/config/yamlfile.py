"""Reading a YAML file strictly: UTF-8 only, no duplicate keys, line numbers kept.

PyYAML keeps the last of two equal keys silently (``poll_interval: 30s`` on line 3 and
``poll_interval: 1h`` on line 40: the second wins, and nobody is told). The document is
composed first (libyaml's C parser where PyYAML has it: the pure-Python scanner is most of
a load's time), and the node tree, which still holds every key, is walked for each
duplicated key of every mapping, at any depth, with both lines; the caller reports them
with the other problems. A merge key (``<<: *defaults``) overriding an anchored value is
not a duplicate.

:func:`read_yaml` also keeps the line of every path (``runner_types.gpu.max`` -> 12), so
problems can be told in the order of the file, each with its line. Whatever cannot be
read at all (missing file, not UTF-8, not YAML) is one :class:`YamlFileError` with one
clear message, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autoscaler.secrets import scrub

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlFileError(Exception):
    """The file cannot be read as YAML at all; the message says why, for a person."""


@dataclass(frozen=True)
class DuplicateKey:
    """``key`` appears twice in the mapping at ``path``: at ``line`` and first at ``first``."""

    path: str
    key: str
    line: int
    first: int

    @property
    def message(self) -> str:
        return (
            f"duplicate key (first on line {self.first}); YAML would silently keep only "
            "the last one: remove one of them"
        )


@dataclass(frozen=True)
class YamlDocument:
    data: Any
    lines: Mapping[str, int] = field(default_factory=dict)
    """Dotted path (as the config reader spells it) -> 1-based line of its key or item."""
    duplicates: tuple[DuplicateKey, ...] = ()


#: libyaml's loader when PyYAML was built with it (the same documents, parsed in C).
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(root: yaml.Node) -> tuple[dict[str, int], tuple[DuplicateKey, ...]]:
    """(path -> line, every duplicated key), each node visited once (aliases and
    recursive documents cannot make it loop or blow up)."""
    lines: dict[str, int] = {}
    duplicates: list[DuplicateKey] = []
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            children = [
                (_join(path, str(key.value)), key, value)
                for key, value in node.value
                if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE_TAG
            ]
            first: dict[tuple[str, str], int] = {}
            for child, key, _ in children:
                line, ident = key.start_mark.line + 1, (key.tag, key.value)
                if ident in first:
                    duplicates.append(DuplicateKey(child, str(key.value), line, first[ident]))
                else:
                    first[ident] = line
        elif isinstance(node, yaml.SequenceNode):
            children = [(f"{path}[{i}]", item, item) for i, item in enumerate(node.value)]
        else:
            continue
        for child, marked, _ in children:  # the first of duplicates keeps its line
            lines.setdefault(child, marked.start_mark.line + 1)
        stack.extend((value, child) for child, _, value in reversed(children))
    return lines, tuple(duplicates)


def parse_yaml(text: str) -> YamlDocument:
    """Parse ``text`` (one document). Raises YamlFileError when it is not YAML."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(None)
        lines, duplicates = _walk(node)  # before construction merges `<<` keys in
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YamlFileError(f"not valid YAML: {scrub(yaml_where(exc))}") from None
    except RecursionError:
        raise YamlFileError("not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()
    return YamlDocument(data, lines, duplicates)


def read_yaml(path: str | os.PathLike[str]) -> YamlDocument:
    """Read and parse a UTF-8 YAML file. Raises YamlFileError with one clear message."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise YamlFileError(f"cannot read: {exc.strerror or type(exc).__name__}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise YamlFileError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}): save the file as UTF-8"
        ) from None
    return parse_yaml(text.removeprefix("\ufeff"))


def yaml_where(exc: Exception) -> str:
    """Where and what in a YAML error, without PyYAML's snippet of the file."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(getattr(exc, "strerror", None) or problem)
