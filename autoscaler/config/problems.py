"""What is wrong with a configuration, and where: the bookkeeping every reader shares.

:class:`ProblemLog` records each :class:`Problem` with its dotted path, remembers which
paths were found wrong (or left unresolved by an unset ``${VAR}``) so the checks that
depend on them stay silent (:meth:`ProblemLog.ok`: one mistake is one message), and
reports them all in the order of the file (:meth:`ProblemLog.report`). No message ever
echoes a credential (:func:`autoscaler.secrets.scrub`). The environment is read
here, once, by ``${VAR}`` expansion (:meth:`ProblemLog.expand`), since an unset variable
is itself a problem (or, allowed, a warning). The typed readers built on it are in
:mod:`autoscaler.config.reader`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.secrets import scrub

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Unresolved:
    """A value that named an unset ``${VAR}``: neither valid nor to be judged further."""

    def __repr__(self) -> str:
        return "<unresolved>"


UNRESOLVED = _Unresolved()


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the configuration, at ``path`` (``line`` when known)."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"line {self.line}: {text}" if self.line is not None else text


class ProblemLog:
    """Records problems at paths and expands ``${VAR}``; never raises on bad input.

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
