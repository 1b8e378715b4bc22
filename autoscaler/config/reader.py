"""Primitives for reading untrusted YAML into typed values, collecting every problem.

Each reader takes the raw value and its dotted path, records a :class:`Problem` when the
value is wrong and returns a safe default so reading can go on: a bad file is reported
whole, once, with every problem and its path, in the order of the file
(:meth:`Reader.report`). A value already found wrong (or left unresolved by an unset
``${VAR}``) is not judged again by the checks that depend on it (:meth:`Reader.ok`), so
one mistake is one message. No message ever echoes a credential
(:func:`autoscaler.config.secrets.scrub`).

**Durations** have one grammar everywhere: one or more ``<number><unit>`` parts, units
``d``, ``h``, ``m``, ``s``, ``ms``, largest first, each at most once (``30s``, ``5m``,
``1h30m``, ``1.5h``, ``500ms``, ``0s``). A bare number (``30``, ``"90"``) is refused: is
it seconds or minutes? No duration may exceed :data:`MAX_DURATION`.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from autoscaler.config.secrets import Secret, SecretUrl, scrub, shown

__all__ = ["MAX_DURATION", "Problem", "Reader", "Secret", "SecretUrl", "parse_duration"]

T = TypeVar("T")

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_UNIT_ORDER = tuple(_UNITS)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DURATION_HINT = "a duration like 30s, 5m or 4h"
#: The longest duration any key accepts (a longer one overflows date arithmetic, and no
#: timeout, interval or back-off of a CI controller is meaningfully longer).
MAX_DURATION = 365 * 86400.0


class _Unresolved:
    """A value that named an unset ``${VAR}``: neither valid nor to be judged further."""

    def __repr__(self) -> str:
        return "<unresolved>"


UNRESOLVED = _Unresolved()


def parse_duration(text: str) -> float:
    """``"90s"``, ``"5m"``, ``"1h30m"``, ``"500ms"`` -> seconds. Raises ValueError.

    Units largest first, each once; a bare number has no unit and is refused.
    """
    text = text.strip()
    pos, total, last = 0, 0.0, -1
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        rank = _UNIT_ORDER.index(match.group(2))
        if rank <= last:
            raise ValueError(f"not a duration: {text!r} (units largest first, each once)")
        last = rank
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 5m, 4h)")
    return total


def format_seconds(seconds: float) -> str:
    """The shortest duration text for ``seconds`` (``3600.0`` -> ``1h``), for messages."""
    for unit in ("d", "h", "m", "s"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the configuration, at ``path`` (``line`` when known)."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"line {self.line}: {text}" if self.line is not None else text


class Reader:
    """Reads values at paths, records problems, never raises on bad input.

    ``allow_unset_env``: an unset ``${VAR}`` is a warning (``check-config
    --allow-unset-env``), not a problem; the value it was in counts as unresolved.
    """

    def __init__(
        self, env: Mapping[str, str] | None = None, *, allow_unset_env: bool = False
    ) -> None:
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.allow_unset_env = allow_unset_env
        self.found: list[Problem] = []
        """Every problem, in the order it was found (:meth:`report` orders by file)."""
        self.warnings: list[str] = []
        self._judged: set[str] = set()  # paths found wrong or unresolved

    @property
    def problems(self) -> list[str]:
        return [str(p) for p in self.found]

    def problem(self, path: str, message: str, *, line: int | None = None) -> None:
        self.found.append(Problem(scrub(path), scrub(message), line))
        self._judged.add(path)

    def ok(self, *paths: str) -> bool:
        """True when nothing at or below any of ``paths`` was found wrong or unresolved:
        checks that combine values skip a value already reported (no follow-on errors)."""
        return not any(
            bad == p or bad.startswith((f"{p}.", f"{p}[")) for p in paths for bad in self._judged
        )

    def report(
        self, positions: Mapping[str, int] | None = None, *, lines: bool = False
    ) -> list[str]:
        """Every problem as text, in file order: by the position of its path (or of its
        nearest ancestor present in the document) in ``positions``; a problem about a
        whole missing section comes first. ``lines``: the positions are line numbers,
        and each message starts with its own."""
        where = positions or {}

        def position(problem: Problem) -> int | None:
            if problem.line is not None:
                return problem.line
            return _nearest(where, problem.path)

        def key(item: tuple[int, Problem]) -> tuple[float, int]:
            pos = position(item[1])
            if pos is None:  # a missing top-level section first; another file's last
                whole = "." not in item[1].path and "[" not in item[1].path
                return (0 if whole and ":" not in item[1].path else float("inf"), item[0])
            return (pos, item[0])

        ordered = sorted(enumerate(self.found), key=key)
        out = []
        for _, problem in ordered:
            line = position(problem) if lines else None
            out.append(str(Problem(problem.path, problem.message, line)))
        return out

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
        """Replace ``${VAR}`` in a string with the environment's value; :data:`UNRESOLVED`
        when a variable is unset (said once, as a problem or, allowed, a warning)."""
        if not isinstance(value, str):
            return value
        unset: list[str] = []

        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.env:
                unset.append(name)
                return ""
            return self.env[name]

        expanded = _ENV_REF.sub(sub, value)
        for name in dict.fromkeys(unset):
            message = f"environment variable {name} is not set"
            if self.allow_unset_env:
                self.warnings.append(f"{path}: {message}")
                self._judged.add(path)
            else:
                self.problem(path, message)
        return UNRESOLVED if unset else expanded

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
        """A duration in the module's grammar, as seconds; ``positive``: 0s is refused."""
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


def _why(text: str) -> str:
    """What is wrong with a duration that does not parse, when it is a common slip."""
    text = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return f": a bare number has no unit (write {text}s for seconds, {text}m for minutes)"
    if _DURATION_PART.sub("", text) == "" and text:
        return ": units go largest first, each once (1h30m, not 30m1h)"
    return ""


def _nearest(positions: Mapping[str, int], path: str) -> int | None:
    """The position of ``path``, else of its longest ancestor in ``positions``."""
    if path in positions:
        return positions[path]
    ancestors = [
        (len(known), pos)
        for known, pos in positions.items()
        if path.startswith((f"{known}.", f"{known}["))
    ]
    return max(ancestors)[1] if ancestors else None


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
