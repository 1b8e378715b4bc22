"""Typed readers of untrusted YAML values, collecting every problem.

Each reader takes the raw value and its dotted path, records a problem when the value is
wrong and returns a safe default so reading can go on: a bad file is reported whole,
once, with every problem and its path, in the order of the file. The bookkeeping of
problems and ``${VAR}`` expansion is :class:`~autoscaler.config.problems.ProblemLog`
(:class:`Reader` extends it); durations follow the grammar of
:mod:`autoscaler.config.durations`. Both modules' public names are re-exported here, so
importers of this module before the split keep them.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from autoscaler.config.durations import (
    DURATION_HINT,
    MAX_DURATION,
    _why,
    format_seconds,
    parse_duration,
)
from autoscaler.config.problems import UNRESOLVED, Problem, ProblemLog, join_path
from autoscaler.secrets import Secret, SecretUrl, shown

__all__ = [
    "DURATION_HINT",
    "MAX_DURATION",
    "UNRESOLVED",
    "Problem",
    "Reader",
    "Secret",
    "SecretUrl",
    "format_seconds",
    "join_path",
    "parse_duration",
]

T = TypeVar("T")


class Reader(ProblemLog):
    """Reads values at paths, records problems, never raises on bad input."""

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

    def string(self, value: Any, path: str, default: str | None = None) -> str:
        value = self.expand(value, path)
        if value is UNRESOLVED:
            return default or ""
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
        expanded = self.expand(value, path)
        if expanded is UNRESOLVED:  # already said, once
            return None
        if not isinstance(expanded, str) or not expanded:
            self.problem(path, "must be a non-empty string (the value is not shown)")
            return None
        return Secret(expanded)

    def url(self, value: Any, path: str) -> SecretUrl | None:
        """A receiver URL: http(s) with a host. It is a secret (a Slack webhook's path is
        its key), so a message names its scheme at most, never the URL."""
        if value is None:
            return None
        expanded = self.expand(value, path)
        if expanded is UNRESOLVED:
            return None
        if not isinstance(expanded, str) or not expanded.strip():
            self.problem(path, "must be a non-empty string (the URL is not shown)")
            return None
        text = expanded.strip()
        try:
            parts = urlsplit(text)
            host, _ = parts.hostname, parts.port
        except ValueError:
            self.problem(path, "is not a valid URL (the URL is not shown)")
            return None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            got = f"a {scheme!r} URL" if scheme and "://" in text else "no http(s):// scheme"
            self.problem(path, f"must be an http(s) URL, got {got} (the URL is not shown)")
            return None
        if not host:
            self.problem(path, "must be an http(s) URL with a host (the URL is not shown)")
            return None
        return SecretUrl(text)

    def integer(
        self, value: Any, path: str, default: int | None = None, *, minimum: int = 0
    ) -> int:
        value = self.expand(value, path)
        if value is UNRESOLVED:
            return default if default is not None else minimum
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
        """A plain number (int or float, not a bool); ``default`` when absent or unresolved."""
        value = self.expand(value, path)
        if value is None or value is UNRESOLVED:
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

    def duration(
        self,
        value: Any,
        path: str,
        default: float | None = None,
        *,
        positive: bool = False,
        maximum: float = MAX_DURATION,
    ) -> float:
        """A duration (the grammar of config.durations) as seconds; ``positive``: 0s is refused."""
        value = self.expand(value, path)
        fallback = default or 0.0
        if value is UNRESOLVED:
            return fallback
        if value is None:
            if default is None:
                self.problem(path, "is required")
            return fallback
        given = value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # a bare number: refused below, like "90"
        if not isinstance(value, str):
            self.problem(path, f"must be {DURATION_HINT}, got {_type_name(value)}")
            return fallback
        try:
            seconds = parse_duration(value)
        except ValueError:
            self.problem(path, f"must be {DURATION_HINT}, got {shown(given)}{_why(value)}")
            return fallback
        if positive and seconds <= 0:
            self.problem(path, "must be greater than zero")
            return fallback
        if seconds > maximum:
            self.problem(path, f"must be at most {format_seconds(maximum)}, got {value.strip()}")
            return fallback
        return seconds

    def optional_duration(self, value: Any, path: str, *, positive: bool = False) -> float | None:
        return None if value is None else self.duration(value, path, positive=positive)

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
            if item is UNRESOLVED:
                continue
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
            self.problem(path, f"must be one of {', '.join(options)}, got {shown(value)}")
            return default
        return str(value)

    def listen(
        self, value: Any, path: str = "listen", default: tuple[str, int] = ("0.0.0.0", 9464)
    ) -> tuple[str, int]:
        """``HOST:PORT`` (``[::1]:9464``; an empty host is every interface) -> (host, port)."""
        if value is None:
            return default
        text = str(value)
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            self.problem(path, f"must be HOST:PORT, got {shown(text)}")
            return default
        return host.strip("[]") or "0.0.0.0", int(port)

    def each(self, value: Any, path: str, read: Callable[[Any, str], T | None]) -> tuple[T, ...]:
        """Read every item of a list (``None`` means an empty list)."""
        if value is None:
            return ()
        if not isinstance(value, list):
            self.problem(path, f"must be a list, got {_type_name(value)}")
            return ()
        items = (read(item, f"{path}[{i}]") for i, item in enumerate(value))
        return tuple(item for item in items if item is not None)


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
