"""YAML -> :class:`~autoscaler.config.schema.Config`, validated once, every problem told.

The steps: read the file strictly (:mod:`~autoscaler.config.yamlfile`: UTF-8, no
duplicate keys, the line of every key); expand ``${VAR}`` in every string (the
environment is read here and nowhere else); read ``alerts.rule_files``; let pydantic
check the document against the schema; tell what is wrong in the order of the file, each
problem with its line (:mod:`~autoscaler.config.problems`).

A value that names an unset variable is a problem (``allow_unset_env``: a warning) and is
not judged further: nothing else is said about it, whatever it would have been.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from autoscaler.config.alerts import AlertRuleConfig, RuleFile
from autoscaler.config.problems import (
    Problem,
    in_file_order,
    join_path,
    nearest,
    problems_of,
    within,
)
from autoscaler.config.schema import Config
from autoscaler.config.values import FileContext, Unset
from autoscaler.config.yamlfile import YamlDocument, YamlFileError, read_yaml
from autoscaler.errors import ConfigError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class LoadedConfig:
    """A valid configuration and what was tolerated on the way (``--allow-unset-env``)."""

    config: Config
    warnings: tuple[str, ...] = ()


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a YAML file. Raises ConfigError listing every problem."""
    return read_config(path, env).config


def read_config(
    path: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    *,
    allow_unset_env: bool = False,
) -> LoadedConfig:
    """Read and validate a YAML file; ``allow_unset_env``: an unset ``${VAR}`` is a warning.

    Raises ConfigError listing every problem, in file order, each with its line.
    """
    try:
        doc = read_yaml(path)
    except YamlFileError as exc:
        raise ConfigError([f"{path}: {exc}"]) from None
    if doc.data is None:  # an empty file: two "is required" lines would not say why
        raise ConfigError([f"{path}: the file is empty: start from config.example.yaml"])
    reading = _Reading(env, allow_unset_env=allow_unset_env)
    return reading.config(doc, Path(path).parent, lines=True)


def parse_config(
    raw: Any, env: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> Config:
    """Validate an already-parsed document. Raises ConfigError listing every problem."""
    doc = YamlDocument(raw, _document_order(raw))
    return _Reading(env).config(doc, base_dir or Path.cwd(), lines=False).config


def _document_order(raw: Any) -> dict[str, int]:
    """Path -> rank in pre-order (a parent before its children, siblings in the file's
    order: dicts keep it), each container visited once."""
    order: dict[str, int] = {}
    stack: list[tuple[str, Any]] = [("", raw)]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if path:
            order.setdefault(path, len(order) + 1)
        if id(value) in seen:
            continue
        if isinstance(value, dict):
            children = [(join_path(path, str(k)), v) for k, v in value.items()]
        elif isinstance(value, list):
            children = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        seen.add(id(value))
        stack.extend(reversed(children))
    return order


class _Reading:
    """One read of a configuration: its problems, warnings and unset variables."""

    def __init__(self, env: Mapping[str, str] | None, *, allow_unset_env: bool = False) -> None:
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.allow_unset_env = allow_unset_env
        self.found: list[Problem] = []
        self.warnings: list[str] = []
        self.unjudged: list[Problem] = []
        """Problems with values that named an unset variable: not told, unless the
        configuration cannot be made without them (``allow_unset_env``)."""

    def config(self, doc: YamlDocument, base: Path, *, lines: bool) -> LoadedConfig:
        self.found += [
            Problem(d.path, d.message, d.line if lines else None) for d in doc.duplicates
        ]
        unset: list[str] = []
        data = self.expand(doc.data, unset)
        context = FileContext(base, self.rule_files(data, base), _pools(data))
        config = self.checked(Config, {} if data is None else data, context, unset)
        if config is None and not self.found:  # an unset variable where no text can go
            self.found = self.unjudged
        if self.found or config is None:
            raise ConfigError(in_file_order(self.found, doc.lines, lines=lines))
        return LoadedConfig(config, tuple(self.warnings))

    def checked(
        self,
        model: type[M],
        data: Any,
        context: FileContext,
        unset: list[str],
        *,
        file: str | None = None,
        lines: Mapping[str, int] | None = None,
    ) -> M | None:
        """``data`` as ``model``, or None with its problems recorded (but none about a
        value that named an unset variable: that one was said already)."""
        try:
            return model.model_validate(data, context=context)
        except ValidationError as exc:
            for found in problems_of(exc, model):
                if file is not None:
                    line = nearest(lines or {}, found.path)
                    found = Problem(found.path, found.message, line, file)  # noqa: PLW2901
                judged = not any(within(found.path, u) for u in unset)
                (self.found if judged else self.unjudged).append(found)
            return None

    def expand(
        self,
        value: Any,
        unset: list[str],
        file: str | None = None,
        lines: Mapping[str, int] | None = None,
    ) -> Any:
        """``value`` with ``${VAR}`` replaced in every string (a copy; shared and
        recursive YAML nodes stay shared); an unset variable's string is :class:`Unset`."""
        copies: dict[int, Any] = {}

        def walk(value: Any, path: str) -> Any:
            if isinstance(value, str):
                return self.expand_text(value, path, unset, file, lines or {})
            if id(value) in copies:
                return copies[id(value)]
            if isinstance(value, dict):
                out: dict[Any, Any] = {}
                copies[id(value)] = out
                for key, item in value.items():
                    out[key] = walk(item, join_path(path, str(key)))
                return out
            if isinstance(value, list):
                items: list[Any] = []
                copies[id(value)] = items
                items.extend(walk(item, f"{path}[{i}]") for i, item in enumerate(value))
                return items
            return value

        return walk(value, "")

    def expand_text(
        self,
        text: str,
        path: str,
        unset: list[str],
        file: str | None,
        lines: Mapping[str, int],
    ) -> str:
        if "${" not in text:
            return text
        missing = list(dict.fromkeys(n for n in _ENV_REF.findall(text) if n not in self.env))
        if not missing:
            return _ENV_REF.sub(lambda m: self.env[m.group(1)], text)
        for name in missing:
            message = f"environment variable {name} is not set"
            problem = Problem(path, message, nearest(lines, path) if file else None, file)
            if self.allow_unset_env:
                self.warnings.append(str(Problem(path, message, file=file)))
            else:
                self.found.append(problem)
        unset.append(path)
        return Unset(text)

    def rule_files(self, data: Any, base: Path) -> dict[str, tuple[AlertRuleConfig, ...] | None]:
        """Each pattern of ``alerts.rule_files`` -> the rules of its files (None: no file
        matches); each file's problems told with its own lines."""
        alerts = data.get("alerts") if isinstance(data, dict) else None
        patterns = alerts.get("rule_files") if isinstance(alerts, dict) else None
        read: dict[str, tuple[AlertRuleConfig, ...] | None] = {}
        for pattern in patterns if isinstance(patterns, list) else []:
            if not isinstance(pattern, str) or isinstance(pattern, Unset):
                continue
            full = pattern if os.path.isabs(pattern) else str(base / pattern)
            files = sorted(glob.glob(full))
            read[pattern] = (
                None
                if not files
                else tuple(rule for file in files for rule in self.rule_file(file, base))
            )
        return read

    def rule_file(self, file: str, base: Path) -> tuple[AlertRuleConfig, ...]:
        try:
            doc = read_yaml(file)
        except YamlFileError as exc:
            self.found.append(Problem("", f"cannot read rules: {exc}", file=file))
            return ()
        self.found += [Problem(d.path, d.message, d.line, file) for d in doc.duplicates]
        unset: list[str] = []
        data = self.expand(doc.data, unset, file, doc.lines)
        if isinstance(data, list):  # a bare list of rules
            data = {"rules": data}
        context = FileContext(base)
        parsed = self.checked(RuleFile, data or {}, context, unset, file=file, lines=doc.lines)
        return () if parsed is None else parsed.rules


def _pools(data: Any) -> frozenset[str]:
    """The pools the document's runner types name (the ``simulation`` section may name
    no other)."""
    types = data.get("runner_types") if isinstance(data, dict) else None
    bodies = types.values() if isinstance(types, dict) else ()
    return frozenset(
        pool
        for body in bodies
        if isinstance(body, dict) and isinstance(body.get("pools"), list)
        for pool in body["pools"]
        if isinstance(pool, str)
    )
