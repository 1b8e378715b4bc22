"""What is wrong with a configuration, told the way a person fixes a file.

pydantic finds the problems, every one at once. This module words them: one line per
problem with the key's dotted path (``runner_types.gpu.max``) and, read from a file, its
line, in the order of the file (:func:`in_file_order`). Our own checks already speak
plainly (:func:`autoscaler.config.values.wrong`); pydantic's structural errors (a
missing or unknown key, a list where a mapping goes) are translated here, an unknown key
with a did-you-mean from the keys its mapping knows. No message ever echoes a credential
(:func:`autoscaler.secrets.scrub`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from autoscaler.config.values import Key, Required, type_name
from autoscaler.secrets import scrub


@dataclass(frozen=True)
class Problem:
    """One thing wrong at ``path`` (``line`` when known; ``file``: another file's)."""

    path: str
    message: str
    line: int | None = None
    file: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", scrub(self.path))
        object.__setattr__(self, "message", scrub(self.message))

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if self.line is not None:
            text = f"line {self.line}: {text}"
        return f"{self.file}: {text}" if self.file else text


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def path_of(loc: Iterable[str | int]) -> str:
    """``("alerts", "rules", 0, "for")`` -> ``alerts.rules[0].for``."""
    path = ""
    for step in loc:
        path = f"{path}[{step}]" if isinstance(step, int) else join_path(path, step)
    return path


def problems_of(error: ValidationError, model: type[BaseModel]) -> list[Problem]:
    """pydantic's errors for ``model``'s document, as problems at their paths."""
    return [
        Problem(path_of(e["loc"]), _message(e, model))
        for e in error.errors()
        if e["type"] != "default_factory_not_called"  # a default from a value found wrong
    ]


def _message(error: ErrorDetails, model: type[BaseModel]) -> str:
    kind, loc, value = error["type"], error["loc"], error.get("input")
    if kind == "missing":
        hints = [m.hint for m in _field(model, loc).metadata if isinstance(m, Required)]
        return "is required" + (f" ({hints[0]})" if hints else "")
    if kind == "extra_forbidden":
        hint = difflib.get_close_matches(str(loc[-1]), _keys(_model_at(model, loc[:-1])), n=1)
        return "unknown key" + (f" (did you mean {hint[0]!r}?)" if hint else "")
    if kind in ("model_type", "model_attributes_type", "dict_type", "mapping_type"):
        return f"must be a mapping, got {type_name(value)}"
    if kind in ("tuple_type", "list_type", "set_type", "frozen_set_type", "iterable_type"):
        return f"must be a list, got {type_name(value)}"
    if kind == "too_short":
        return "must be a non-empty " + ("mapping" if isinstance(value, dict) else "list")
    message = error["msg"]  # ours, or pydantic's own sentence
    return message[:1].lower() + message[1:]


def _choices(tp: Any) -> list[Any]:
    """What ``tp`` may be: its union's members, without their Annotated metadata."""
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, UnionType):
        return [member for arg in get_args(tp) for member in _choices(arg)]
    return [tp]


def _fields(model: type[BaseModel] | None) -> dict[str, FieldInfo]:
    """A model's fields by the key a file writes (its alias)."""
    if model is None:
        return {}
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _keys(model: type[BaseModel] | None) -> list[str]:
    """The keys a file may write in ``model`` (not the name it is filed under)."""
    return [
        key
        for key, field in _fields(model).items()
        if not any(isinstance(m, Key) for m in field.metadata)
    ]


def _model_at(model: type[BaseModel], loc: Iterable[str | int]) -> type[BaseModel] | None:
    """The model of the mapping at ``loc`` (None: not a mapping of ours)."""
    here: Any = model
    for step in loc:
        here = _inside(here, step)
    for tp in _choices(here):
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return tp
    return None


def _inside(tp: Any, step: str | int) -> Any:
    """The type of item ``step`` of a value of type ``tp`` (None: unknown)."""
    for choice in _choices(tp):
        if isinstance(choice, type) and issubclass(choice, BaseModel):
            field = _fields(choice).get(str(step))
            if field is not None:
                return field.annotation
        elif get_origin(choice) in (tuple, list, frozenset, set):
            return get_args(choice)[0]
        elif get_origin(choice) in (dict, Mapping):
            return get_args(choice)[1]
    return None


def _field(model: type[BaseModel], loc: tuple[str | int, ...]) -> FieldInfo:
    return _fields(_model_at(model, loc[:-1])).get(str(loc[-1])) or FieldInfo()


def in_file_order(
    found: Iterable[Problem], positions: Mapping[str, int], *, lines: bool
) -> list[str]:
    """Every problem as text, in file order: by the position of its path (or of its
    nearest ancestor present in the document) in ``positions``; a problem about a whole
    missing section comes first, another file's last. ``lines``: the positions are line
    numbers, and each message starts with its own."""

    def position(problem: Problem) -> int | None:
        if problem.file is not None:
            return None
        return problem.line if problem.line is not None else nearest(positions, problem.path)

    def key(item: tuple[int, Problem]) -> tuple[float, int]:
        problem = item[1]
        pos = position(problem)
        if pos is None:  # a missing top-level section first; another file's last
            whole = problem.file is None and "." not in problem.path and "[" not in problem.path
            return (0 if whole else float("inf"), item[0])
        return (pos, item[0])

    ordered = [problem for _, problem in sorted(enumerate(found), key=key)]
    return [
        str(Problem(p.path, p.message, position(p)) if lines and p.file is None else p)
        for p in ordered
    ]


def within(path: str, ancestor: str) -> bool:
    """``path`` is ``ancestor`` or below it."""
    return path == ancestor or path.startswith((f"{ancestor}.", f"{ancestor}["))


def nearest(positions: Mapping[str, int], path: str) -> int | None:
    """The position of ``path``, else of its longest ancestor in ``positions``."""
    if path in positions:
        return positions[path]
    ancestors = [(len(known), pos) for known, pos in positions.items() if within(path, known)]
    return max(ancestors)[1] if ancestors else None
