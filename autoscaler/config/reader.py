"""Primitives for reading untrusted YAML into typed values, collecting every problem.

Each reader takes the raw value and its dotted path, appends a message to
``problems`` when the value is wrong and returns a safe default so reading can go on:
a bad file is reported whole, once, with every problem and its path.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Secret:
    """A string that never shows itself in a repr, str, log line or exception."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def parse_duration(text: str) -> float:
    """``"90s"``, ``"5m"``, ``"1h30m"``, ``"500ms"`` -> seconds. Raises ValueError."""
    text = text.strip()
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 5m, 4h)")
    return total


class Reader:
    """Reads values at paths, records problems, never raises on bad input."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.problems: list[str] = []
        self.env: Mapping[str, str] = os.environ if env is None else env

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}" if path else message)

    def mapping(self, value: Any, path: str, allowed: Iterable[str]) -> dict[str, Any]:
        """A mapping whose keys must be in ``allowed``; unknown keys get a did-you-mean."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(path, f"must be a mapping, got {_type_name(value)}")
            return {}
        known = list(allowed)
        for key in value:
            if key not in known:
                hint = difflib.get_close_matches(str(key), known, n=1)
                suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
                self.problem(join_path(path, str(key)), f"unknown key{suffix}")
        return {k: v for k, v in value.items() if k in known}

    def expand(self, value: Any, path: str) -> Any:
        """Replace ``${VAR}`` in a string with the environment's value."""
        if not isinstance(value, str):
            return value

        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.env:
                self.problem(path, f"environment variable {name} is not set")
                return ""
            return self.env[name]

        return _ENV_REF.sub(sub, value)

    def string(self, value: Any, path: str, default: str | None = None) -> str:
        value = self.expand(value, path)
        if value is None:
            if default is None:
                self.problem(path, "is required")
                return ""
            return default
        if not isinstance(value, str) or not value.strip():
            self.problem(path, "must be a non-empty string")
            return default or ""
        return value

    def optional_string(self, value: Any, path: str) -> str | None:
        return None if value is None else self.string(value, path)

    def secret(self, value: Any, path: str) -> Secret | None:
        if value is None:
            return None
        before = len(self.problems)
        expanded = self.expand(value, path)
        if len(self.problems) > before:  # an unset ${VAR}: already said, once
            return None
        if not isinstance(expanded, str) or not expanded:
            self.problem(path, "must be a non-empty string (the value is not shown)")
            return None
        return Secret(expanded)

    def integer(
        self, value: Any, path: str, default: int | None = None, *, minimum: int = 0
    ) -> int:
        value = self.expand(value, path)
        if value is None:
            if default is None:
                self.problem(path, "is required")
                return minimum
            return default
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(path, f"must be an integer, got {_type_name(value)}")
            return default if default is not None else minimum
        if value < minimum:
            self.problem(path, f"must be >= {minimum}, got {value}")
            return minimum
        return value

    def number(self, value: Any, path: str, default: float) -> float:
        """A plain number (int or float, not a bool); ``default`` when absent."""
        value = self.expand(value, path)
        if value is None:
            return default
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problem(path, f"must be a number, got {_type_name(value)}")
            return default
        return float(value)

    def optional_integer(self, value: Any, path: str, *, minimum: int = 0) -> int | None:
        return None if value is None else self.integer(value, path, minimum=minimum)

    def boolean(self, value: Any, path: str, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problem(path, f"must be true or false, got {_type_name(value)}")
            return default
        return value

    def duration(self, value: Any, path: str, default: float | None = None) -> float:
        value = self.expand(value, path)
        if value is None:
            if default is None:
                self.problem(path, "is required")
                return 0.0
            return default
        if isinstance(value, bool):
            self.problem(path, "must be a duration like 30s, 5m or 4h")
            return default or 0.0
        if isinstance(value, (int, float)):
            seconds = float(value)
        else:
            try:
                seconds = parse_duration(str(value))
            except ValueError:
                self.problem(path, f"must be a duration like 30s, 5m or 4h, got {value!r}")
                return default or 0.0
        if seconds < 0:
            self.problem(path, "must not be negative")
            return default or 0.0
        return seconds

    def optional_duration(self, value: Any, path: str) -> float | None:
        return None if value is None else self.duration(value, path)

    def string_list(
        self, value: Any, path: str, *, default: tuple[str, ...] | None = None
    ) -> tuple[str, ...]:
        """A non-empty list of non-empty strings."""
        if value is None and default is not None:
            return default
        if not isinstance(value, list) or not value:
            self.problem(path, "must be a non-empty list")
            return default or ()
        out: list[str] = []
        for i, raw in enumerate(value):
            item = self.expand(raw, f"{path}[{i}]")
            if not isinstance(item, str) or not item.strip():
                self.problem(f"{path}[{i}]", "must be a non-empty string")
            else:
                out.append(item)
        return tuple(out)

    def choice(self, value: Any, path: str, choices: Iterable[str], default: str) -> str:
        options = list(choices)
        if value is None:
            return default
        if value not in options:
            self.problem(path, f"must be one of {', '.join(options)}, got {value!r}")
            return default
        return str(value)

    def each(self, value: Any, path: str, read: Callable[[Any, str], T | None]) -> tuple[T, ...]:
        """Read every item of a list (``None`` means an empty list)."""
        if value is None:
            return ()
        if not isinstance(value, list):
            self.problem(path, f"must be a list, got {_type_name(value)}")
            return ()
        items = (read(item, f"{path}[{i}]") for i, item in enumerate(value))
        return tuple(item for item in items if item is not None)


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def yaml_where(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(getattr(exc, "strerror", None) or problem)
