"""Reading a YAML file strictly: UTF-8 only, no duplicate keys, line numbers kept.

PyYAML keeps the last of two equal keys silently (``poll_interval: 30s`` on line 3 and
``poll_interval: 1h`` on line 40: the second wins, and nobody is told).
:class:`UniqueKeyLoader` is a ``SafeLoader`` that records every duplicated key of every
mapping, at any depth, with both lines; the caller reports them with the other problems.
A merge key (``<<: *defaults``) overriding an anchored value is not a duplicate.

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


class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that records duplicated mapping keys instead of keeping the last."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[yaml.MappingNode, str, int, int]] = []

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        node: yaml.MappingNode = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], int] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                continue
            line, ident = key.start_mark.line + 1, (key.tag, key.value)
            if ident in seen:
                self.duplicates.append((node, str(key.value), line, seen[ident]))
            else:
                seen[ident] = line
        return node


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(root: yaml.Node) -> tuple[dict[str, int], dict[int, str]]:
    """(path -> line, id(mapping node) -> its path), each node visited once (aliases and
    recursive documents cannot make it loop or blow up)."""
    lines: dict[str, int] = {}
    paths: dict[int, str] = {}
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            paths[id(node)] = path
            children = [
                (_join(path, str(key.value)), key, value)
                for key, value in node.value
                if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE_TAG
            ]
        elif isinstance(node, yaml.SequenceNode):
            children = [(f"{path}[{i}]", item, item) for i, item in enumerate(node.value)]
        else:
            continue
        for child, marked, _ in children:  # the first of duplicates keeps its line
            lines.setdefault(child, marked.start_mark.line + 1)
        stack.extend((value, child) for child, _, value in reversed(children))
    return lines, paths


def parse_yaml(text: str) -> YamlDocument:
    """Parse ``text`` (one document). Raises YamlFileError when it is not YAML."""
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(None)
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YamlFileError(f"not valid YAML: {scrub(yaml_where(exc))}") from None
    except RecursionError:
        raise YamlFileError("not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()
    lines, paths = _walk(node)
    duplicates = tuple(
        DuplicateKey(_join(paths.get(id(mapping), ""), key), key, line, first)
        for mapping, key, line, first in loader.duplicates
    )
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
