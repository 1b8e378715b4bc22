"""How one value of the configuration is read: its check, its message, its JSON Schema.

A leaf type is a marker in ``Annotated`` (``Annotated[float, Duration(positive=True)]``).
pydantic hands it the raw value; :meth:`Value.check` returns the Python value or raises
:func:`wrong` with the sentence a user reads (``must be a duration like 30s, 5m or 4h``,
not pydantic's wording). :meth:`Value.json_schema` is what an editor checks the same value
against, and :meth:`Value.dump` writes a Python value back the way a file says it (so the
schema's defaults read ``30s``, not ``30.0``).

A value read from a file (validated with a :class:`FileContext`) must be written the
file's way: a duration needs its unit, a time is a quoted ``"HH:MM"``. A value built in
code may be the Python value itself (seconds as a float, a :class:`Secret`). A value
whose ``${VAR}`` is unset arrives as :class:`Unset` and is not judged: text keeps what was
written, anything else takes its default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, get_args
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import (
    InitErrorDetails,
    PydanticCustomError,
    PydanticUseDefault,
    core_schema,
)

from autoscaler.config.durations import (
    DURATION_HINT,
    DURATION_PATTERN,
    MAX_DURATION,
    format_seconds,
    parse_duration,
    why_not_a_duration,
)
from autoscaler.domain import normalize_labels
from autoscaler.secrets import Secret, SecretUrl, shown

#: The type of every problem our checks raise (pydantic's own types are translated by
#: :mod:`autoscaler.config.problems`).
PROBLEM = "config"


@dataclass(frozen=True)
class FileContext:
    """Validation context of a configuration read from a file (or a parsed document)."""

    base_dir: Path
    """Relative paths in the file (``private_key_file``, ``rule_files``) start here."""
    rule_files: Mapping[str, tuple[Any, ...] | None] = field(default_factory=dict)
    """Each ``alerts.rule_files`` pattern -> the rules its files hold (already checked,
    :mod:`autoscaler.config.load`); None: no file matched."""
    pools: frozenset[str] = frozenset()
    """The pools the file's runner types name (``simulation`` may name no other)."""


class Unset(str):
    """A string that named an unset ``${VAR}``: already reported, not judged again."""

    __slots__ = ()


class Section(BaseModel):
    """A mapping of the configuration: its keys and no others, frozen once read, each key
    documented: a field's docstring is its description in the JSON Schema (read there,
    by :mod:`autoscaler.config.export`: pydantic's ``use_attribute_docstrings`` would read
    every model's source at each import, for descriptions only the schema shows)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        defer_build=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, value: Any) -> Any:
        """``key:`` with nothing after it (YAML's null) is the key left out: its default."""
        if isinstance(value, dict) and any(v is None for v in value.values()):
            return {k: v for k, v in value.items() if v is not None}
        return value


def from_file(info: ValidationInfo) -> bool:
    return isinstance(info.context, FileContext)


def wrong(message: str) -> PydanticCustomError:
    """The problem with a value, as the user reads it (``raise wrong(...)``)."""
    return PydanticCustomError(PROBLEM, message)


Where = tuple[str | int, ...]


def fail(*problems: tuple[Where, str], besides: ValidationError | None = None) -> NoReturn:
    """Raise every ``(where, message)`` at once, ``besides`` what pydantic found; ``where``
    is relative to the value being checked (``()``: the value itself; ``("max",)``: its
    key ``max``)."""
    found = [] if besides is None else besides.errors(include_url=False)
    raise ValidationError.from_exception_data(
        "config",
        [
            InitErrorDetails(
                type=PydanticCustomError(e["type"], e["msg"]), loc=e["loc"], input=e["input"]
            )
            for e in found
        ]
        + [InitErrorDetails(type=wrong(message), loc=loc, input=None) for loc, message in problems],
    )


def together(value: Any, handler: Callable[[Any], Any], problems: list[tuple[Where, str]]) -> Any:
    """pydantic's validation of ``value``, and ``problems`` found in the raw value, told
    together (a check of what the file says that holds whatever else is wrong with it)."""
    try:
        checked = handler(value)
    except ValidationError as exc:
        if problems:
            fail(*problems, besides=exc)
        raise
    if problems:
        fail(*problems)
    return checked


def type_name(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", bool: "a boolean", int: "an integer"}
    if isinstance(value, str):
        return "a string"
    return names.get(type(value), "a number" if isinstance(value, float) else type(value).__name__)


def written(pattern: str) -> str:
    """A JSON Schema pattern that also lets ``${VAR}`` through (expanded at load, so the
    schema cannot judge it)."""
    return f"(?:{pattern})|\\$\\{{"


class Value:
    """A leaf type's marker: subclasses say how to check, describe and dump a value."""

    def check(self, value: Any, info: ValidationInfo) -> Any:
        raise NotImplementedError

    def unset(self, value: Unset) -> Any:
        """An unset ``${VAR}``: the field's default (text overrides: what was written)."""
        raise PydanticUseDefault

    def json_schema(self) -> JsonSchemaValue:
        raise NotImplementedError

    def dump(self, value: Any) -> Any:
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def validate(value: Any, info: ValidationInfo) -> Any:
            if isinstance(value, Unset):
                return self.unset(value)
            return self.check(value, info)

        return core_schema.with_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(self.dump),
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return self.json_schema()


class Required:
    """What to add to ``is required`` when the key is missing (``at least one ...``)."""

    def __init__(self, hint: str) -> None:
        self.hint = hint


class Text(Value):
    """A non-empty string; ``pattern`` (a regular expression it must match) with ``says``,
    what the value must be (``must be an http(s) URL, got 'ftp://x'``)."""

    def __init__(self, pattern: str | None = None, says: str = "") -> None:
        self.pattern, self.says = pattern, says

    def check(self, value: Any, info: ValidationInfo) -> str:
        if not isinstance(value, str) or not value.strip():
            raise wrong("must be a non-empty string")
        if self.pattern is not None and not re.search(self.pattern, value):
            raise wrong(f"must be {self.says}, got {shown(value)}")
        return value

    def unset(self, value: Unset) -> str:
        return value

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "string", "minLength": 1, "pattern": written(self.pattern or r"\S")}


class Choice(Value):
    """One of a few words."""

    def __init__(self, *options: str) -> None:
        self.options = options

    def check(self, value: Any, info: ValidationInfo) -> str:
        if value not in self.options:
            raise wrong(f"must be one of {', '.join(self.options)}, got {shown(value)}")
        return str(value)

    def json_schema(self) -> JsonSchemaValue:
        return {"enum": list(self.options)}


class Flag(Value):
    """``true`` or ``false`` (not ``yes``, not ``1``)."""

    def check(self, value: Any, info: ValidationInfo) -> bool:
        if not isinstance(value, bool):
            raise wrong(f"must be true or false, got {type_name(value)}")
        return value

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "boolean"}


class Integer(Value):
    """A whole number from ``minimum`` (to ``maximum``); digits in a string are fine."""

    def __init__(self, minimum: int = 0, maximum: int | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum

    def check(self, value: Any, info: ValidationInfo) -> int:
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong(f"must be an integer, got {type_name(value)}")
        if self.maximum is not None and not self.minimum <= value <= self.maximum:
            raise wrong(f"must be from {self.minimum} to {self.maximum}, got {value}")
        if value < self.minimum:
            raise wrong(f"must be >= {self.minimum}, got {value}")
        return value

    def json_schema(self) -> JsonSchemaValue:
        schema: JsonSchemaValue = {"type": "integer", "minimum": self.minimum}
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema


class Fraction(Value):
    """A number above 0 and below 1 (``up_to_one``: 1 included)."""

    def __init__(self, *, up_to_one: bool = False) -> None:
        self.up_to_one = up_to_one

    def check(self, value: Any, info: ValidationInfo) -> float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise wrong("must be a number, got a string") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong(f"must be a number, got {type_name(value)}")
        number = float(value)
        if self.up_to_one and not 0 < number <= 1:  # a NaN fails this too
            raise wrong(f"must be above 0 and at most 1, got {number}")
        if not self.up_to_one and not 0 < number < 1:
            raise wrong(f"must be between 0 and 1 (exclusive), got {number:g}")
        return number

    def json_schema(self) -> JsonSchemaValue:
        high = "maximum" if self.up_to_one else "exclusiveMaximum"
        return {"type": "number", "exclusiveMinimum": 0, high: 1}


class Duration(Value):
    """Seconds, written with units (``30s``, ``5m``, ``1h30m``: :mod:`~.durations`).

    ``positive``: ``0s`` is refused. A bare number in a file is refused (seconds or
    minutes?); built in code it is seconds.
    """

    def __init__(self, *, positive: bool = False, maximum: float = MAX_DURATION) -> None:
        self.positive, self.maximum = positive, maximum

    def check(self, value: Any, info: ValidationInfo) -> float:
        given = value
        if isinstance(value, bool):
            raise wrong(f"must be {DURATION_HINT}, got a boolean")
        if isinstance(value, int | float):
            if not from_file(info):
                return self.bounded(float(value), format_seconds(float(value)))
            value = str(value)  # a bare number in a file: refused below, like "90"
        if not isinstance(value, str):
            raise wrong(f"must be {DURATION_HINT}, got {type_name(value)}")
        try:
            seconds = parse_duration(value)
        except ValueError:
            raise wrong(
                f"must be {DURATION_HINT}, got {shown(given)}{why_not_a_duration(value)}"
            ) from None
        return self.bounded(seconds, value.strip())

    def bounded(self, seconds: float, text: str) -> float:
        if self.positive and seconds <= 0:
            raise wrong("must be greater than zero")
        if seconds > self.maximum:
            raise wrong(f"must be at most {format_seconds(self.maximum)}, got {text}")
        return seconds

    def json_schema(self) -> JsonSchemaValue:
        return {
            "type": "string",
            "pattern": written(DURATION_PATTERN),
            "examples": ["30s", "5m", "1h30m"],
        }

    def dump(self, value: Any) -> Any:
        return format_seconds(value) if isinstance(value, int | float) else value


class SecretText(Value):
    """A credential: any non-empty string, held as a :class:`Secret`, never shown."""

    def check(self, value: Any, info: ValidationInfo) -> Secret:
        if isinstance(value, Secret):
            return value
        if not isinstance(value, str) or not value:
            raise wrong("must be a non-empty string (the value is not shown)")
        return Secret(value)

    def unset(self, value: Unset) -> Secret:
        return Secret(value)

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "string", "minLength": 1}

    def dump(self, value: Any) -> Any:
        return str(value)  # ``***``: a dump (model_dump_json, a log) never holds a secret


class Url(Value):
    """An http(s) URL with a host, held as a :class:`SecretUrl`: a Slack webhook's path is
    its key and a URL may carry ``user:password@``, so no message shows it."""

    def check(self, value: Any, info: ValidationInfo) -> SecretUrl:
        if isinstance(value, SecretUrl):
            return value
        if not isinstance(value, str) or not value.strip():
            raise wrong("must be a non-empty string (the URL is not shown)")
        text = value.strip()
        try:
            parts = urlsplit(text)
            host, _ = parts.hostname, parts.port
        except ValueError:
            raise wrong("is not a valid URL (the URL is not shown)") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            got = f"a {scheme!r} URL" if scheme and "://" in text else "no http(s):// scheme"
            raise wrong(f"must be an http(s) URL, got {got} (the URL is not shown)")
        if not host:
            raise wrong("must be an http(s) URL with a host (the URL is not shown)")
        return SecretUrl(text)

    def unset(self, value: Unset) -> SecretUrl:
        return SecretUrl(value)

    def dump(self, value: Any) -> Any:
        return str(value)  # ``scheme://host/...`` at most

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "string", "pattern": written("^[Hh][Tt][Tt][Pp][Ss]?://[^/?#]")}


class Address(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class Listen(Value):
    """``HOST:PORT`` (``[::1]:9464``; an empty host is every interface)."""

    def check(self, value: Any, info: ValidationInfo) -> Address:
        if isinstance(value, Address):
            return value
        text = str(value)
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise wrong(f"must be HOST:PORT, got {shown(text)}")
        return Address(host.strip("[]") or "0.0.0.0", int(port))

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "string", "pattern": written(r"^(\[[0-9A-Fa-f:.]+\]|[^:\s]*):[0-9]{1,5}$")}

    def dump(self, value: Any) -> Any:
        return str(value)


class Strings(Value):
    """A non-empty list of non-empty strings (``lower``: lower-cased)."""

    def __init__(self, *, lower: bool = False) -> None:
        self.lower = lower

    def check(self, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, tuple | frozenset) and not from_file(info):
            return self.made(tuple(value))
        if not isinstance(value, list) or not value:
            raise wrong("must be a non-empty list")
        bad = [
            ((i,), "must be a non-empty string")
            for i, item in enumerate(value)
            if not isinstance(item, str) or not item.strip()
        ]
        if bad:
            fail(*bad)
        return self.made(tuple(value))

    def made(self, items: tuple[str, ...]) -> Any:
        return tuple(s.lower() for s in items) if self.lower else items

    def json_schema(self) -> JsonSchemaValue:
        item = {"type": "string", "minLength": 1}
        return {"type": "array", "items": item, "minItems": 1}


class Labels(Strings):
    """Runner labels: compared the way GitHub does, case-insensitively."""

    def made(self, items: tuple[str, ...]) -> frozenset[str]:
        return normalize_labels(items)


class Key(Value):
    """The key a mapping's item is filed under (``runner_types.<name>``): set by
    :class:`ByName`, never written inside the item itself."""

    def check(self, value: Any, info: ValidationInfo) -> str:
        if from_file(info):
            raise wrong("unknown key")
        return str(value)

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "string"}


class ByName:
    """A YAML mapping ``name -> item`` read as the items, each told its ``name``.

    Annotates ``tuple[Item, ...]`` (the items in the file's order) or ``Mapping[str,
    Item]``; ``minimum``: that many items at least. Built in code, a tuple of items is
    taken as it is.
    """

    def __init__(self, *, minimum: int = 0) -> None:
        self.minimum = minimum

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        args = get_args(source)
        as_tuple = len(args) == 2 and args[1] is Ellipsis
        item = args[0] if as_tuple else args[1]
        items = core_schema.dict_schema(
            core_schema.str_schema(), handler.generate_schema(item), min_length=self.minimum or None
        )

        def named(value: Any, inner: Callable[[Any], Any]) -> Any:
            if as_tuple and isinstance(value, tuple | list):
                return tuple(value)
            checked: dict[str, Any] = inner(value)
            named = {k: v.model_copy(update={"name": k}) for k, v in checked.items()}
            return tuple(named.values()) if as_tuple else named

        def by_name(value: Any) -> Any:
            return {item.name: item for item in value} if isinstance(value, tuple) else value

        return core_schema.no_info_wrap_validator_function(
            named,
            items,
            serialization=core_schema.plain_serializer_function_ser_schema(by_name),
        )
