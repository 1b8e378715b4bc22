"""``min_idle`` as a number, a weekly UTC schedule, or predicted from the arrival rate.

```yaml
min_idle: 2                       # always 2
min_idle:
  default: 1                      # outside every window
  schedule:                       # first matching window wins; times are UTC
    - {days: [mon, tue, wed, thu, fri], from: "08:00", to: "18:00", min_idle: 4}
    - {from: "22:00", to: "02:00", min_idle: 2}   # every day; crosses midnight
min_idle:
  default: 0
  predict: {window: 15m, lead: 1m, quantile: 0.9, max: 10}   # warm runners for the jobs
                                  # the recent arrival rate expects within `lead`
```

With ``predict`` the policy keeps at least the scheduled number and at least the Poisson
``quantile`` of the arrivals expected within ``lead`` at the rate seen over ``window``
(:mod:`autoscaler.scale.forecast`), at most ``max``.

A window covers ``from`` (inclusive) to ``to`` (exclusive, ``"24:00"`` is the end of the
day). When ``to`` is earlier than ``from`` the window crosses midnight, and ``days`` names
the day it starts on (a Friday 22:00-02:00 window covers Saturday 01:00). No ``days``:
every day. :meth:`MinIdle.at` is pure: the policy passes ``now``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Self

from pydantic import (
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationInfo,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticUseDefault, core_schema

from autoscaler.config.values import (
    Duration,
    Fraction,
    Integer,
    Required,
    Section,
    Unset,
    Value,
    fail,
    from_file,
    written,
    wrong,
)

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_DAY_MINUTES = 24 * 60


class Clock(Value):
    """A UTC time of day ``"HH:MM"`` as minutes since midnight; ``end``: ``"24:00"`` too."""

    def __init__(self, *, end: bool = False) -> None:
        self.end = end

    def check(self, value: Any, info: ValidationInfo) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not from_file(info):
                return value
            raise wrong(
                'must be a quoted "HH:MM" string (YAML reads an unquoted 18:00 as a number)'
            )
        text = str(value).strip()
        if self.end and text == "24:00":
            return _DAY_MINUTES
        match = _HHMM.match(text)
        if match is None:
            raise wrong(f'must be a time "HH:MM" from 00:00 to 23:59, got {value!r}')
        return int(match.group(1)) * 60 + int(match.group(2))

    def json_schema(self) -> JsonSchemaValue:
        last = "|24:00" if self.end else ""
        return {"type": "string", "pattern": written(f"^(([01][0-9]|2[0-3]):[0-5][0-9]{last})$")}


class Days(Value):
    """Weekday names (``mon`` ... ``sun``) as numbers, 0 for Monday."""

    def check(self, value: Any, info: ValidationInfo) -> frozenset[int]:
        if isinstance(value, frozenset | set) and not from_file(info):
            return frozenset(value)
        if not isinstance(value, list) or not value:
            raise wrong(f"must be a non-empty list of {', '.join(DAYS)}")
        names = [str(day).strip().lower() for day in value]
        bad = [
            ((i,), f"must be one of {', '.join(DAYS)}, got {day!r}")
            for i, (day, name) in enumerate(zip(value, names, strict=True))
            if name not in DAYS
        ]
        if bad:
            fail(*bad)
        return frozenset(DAYS.index(name) for name in names)

    def json_schema(self) -> JsonSchemaValue:
        return {"type": "array", "items": {"enum": list(DAYS)}, "minItems": 1}


class IdleWindow(Section):
    """Warm runners kept from `from` to `to` (UTC), on `days`."""

    start: Annotated[int, Clock(), Required('"HH:MM", UTC')] = Field(alias="from")
    """Start of the window, `"HH:MM"` UTC (inclusive); quote it (YAML reads an unquoted
    18:00 as a number)."""
    end: Annotated[int, Clock(end=True), Required('"HH:MM", UTC')] = Field(alias="to")
    """End of the window, `"HH:MM"` UTC (exclusive; `"24:00"`: the end of the day).
    Earlier than `from`: the window ends the next day."""
    min_idle: Annotated[int, Integer()]
    """Warm idle runners kept inside the window."""
    days: Annotated[frozenset[int], Days()] = frozenset()
    """Weekdays the window starts on (`mon` ... `sun`); absent: every day."""

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if self.start == self.end:
            fail(((), "from and to must differ (a whole day: use default)"))
        return self

    def covers(self, now: datetime) -> bool:
        utc = now.astimezone(UTC)
        minute, day = utc.hour * 60 + utc.minute, utc.weekday()
        if self.start < self.end:
            inside = self.start <= minute < self.end
        elif minute >= self.start:
            inside = True
        else:  # after midnight: the window started the day before
            inside, day = minute < self.end, (day - 1) % 7
        return inside and (not self.days or day in self.days)


class Prediction(Section):
    """Warm runners from the recent arrival rate (Poisson arrivals)."""

    window: Annotated[float, Duration(positive=True)] = 900.0
    """Arrivals are counted over this long."""
    lead: Annotated[float, Duration(positive=True)] = 60.0
    """Warm runners are kept for the jobs expected within this long."""
    quantile: Annotated[float, Fraction()] = 0.9
    """Enough for this share of such periods."""
    max: Annotated[int, Integer()] = 10
    """Never more predicted warm runners than this."""


class MinIdle(Section):
    """Warm idle runners to keep: `default`, or the first window of `schedule` that covers
    the time; with `predict`, at least what the arrival rate calls for. A plain number
    `n` is `{default: n}`."""

    default: Annotated[int, Integer()] = 0
    """Warm idle runners outside every window."""
    schedule: tuple[IdleWindow, ...] = ()
    """Windows of the week (UTC), the first that covers the time wins."""
    predict: Prediction | None = None
    """Also keep the warm runners the recent arrival rate calls for."""

    @model_validator(mode="after")
    def _windows(self, info: ValidationInfo) -> Self:
        """A mapping says what it adds to a plain number: windows, a prediction or both."""
        emptied = "schedule" in self.model_fields_set and not self.schedule
        if from_file(info) and (emptied or (not self.schedule and self.predict is None)):
            fail((("schedule",), "must be a non-empty list of windows (or use an integer)"))
        return self

    def at(self, now: datetime) -> int:
        for window in self.schedule:
            if window.covers(now):
                return window.min_idle
        return self.default

    @property
    def maximum(self) -> int:
        """The most it ever asks for (checked against the type's ``max``)."""
        predicted = self.predict.max if self.predict is not None else 0
        return max([self.default, predicted, *(w.min_idle for w in self.schedule)])


class CountOrMinIdle:
    """``min_idle``'s two forms: a plain count, or the mapping it abbreviates."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        count = Integer()

        def read(value: Any, inner: core_schema.ValidatorFunctionWrapHandler, info: Any) -> Any:
            if isinstance(value, Unset):
                raise PydanticUseDefault
            if isinstance(value, list):
                raise wrong("must be an integer or a mapping {default, schedule, predict}")
            if isinstance(value, dict | MinIdle):
                return inner(value)
            return MinIdle(default=count.check(value, info))

        return core_schema.with_info_wrap_validator_function(
            read,
            handler(source),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda m: m.default if not m.schedule and m.predict is None else m
            ),
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"anyOf": [Integer().json_schema(), handler(schema)]}
