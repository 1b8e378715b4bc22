"""``min_idle`` as a number, a weekly UTC schedule, or predicted from the arrival rate: a
frozen value and its config reader.

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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from autoscaler.config.reader import Reader

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_MINUTES = 24 * 60
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class IdleWindow:
    """``min_idle`` warm runners from ``start`` to ``end`` (minutes of the UTC day)."""

    start: int
    end: int
    """Exclusive; below ``start``: the window ends the next day."""
    min_idle: int
    days: frozenset[int] = frozenset()
    """Weekdays (0 = Monday) the window starts on; empty: every day."""

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


@dataclass(frozen=True)
class Prediction:
    """Warm runners from the recent arrival rate (an option: ``min_idle.predict``)."""

    window: float = 900.0
    """Arrivals are counted over this many seconds."""
    lead: float = 60.0
    """Keep warm runners for the jobs expected within this many seconds."""
    quantile: float = 0.9
    """Enough for this share of such periods (Poisson arrivals)."""
    max: int = 10
    """Never more predicted warm runners than this."""


@dataclass(frozen=True)
class MinIdle:
    """Warm idle runners to keep: ``default``, or the first window of ``schedule`` that
    covers the time; with ``predict``, at least what the arrival rate calls for."""

    default: int = 0
    schedule: tuple[IdleWindow, ...] = ()
    predict: Prediction | None = None

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


def _minute(r: Reader, value: Any, path: str, *, end: bool) -> int | None:
    if value is None:
        r.problem(path, 'is required ("HH:MM", UTC)')
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        r.problem(
            path, 'must be a quoted "HH:MM" string (YAML reads an unquoted 18:00 as a number)'
        )
        return None
    text = str(value).strip()
    if end and text == "24:00":
        return _DAY_MINUTES
    match = _HHMM.match(text)
    if match is None:
        r.problem(path, f'must be a time "HH:MM" from 00:00 to 23:59, got {value!r}')
        return None
    return int(match.group(1)) * 60 + int(match.group(2))


def _days(r: Reader, value: Any, path: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not value:
        r.problem(path, f"must be a non-empty list of {', '.join(DAYS)}")
        return frozenset()
    out = set()
    for i, day in enumerate(value):
        name = str(day).strip().lower()
        if name not in DAYS:
            r.problem(f"{path}[{i}]", f"must be one of {', '.join(DAYS)}, got {day!r}")
        else:
            out.add(DAYS.index(name))
    return frozenset(out)


def _window(r: Reader, value: Any, path: str) -> IdleWindow | None:
    if not isinstance(value, dict):
        r.problem(path, "must be a mapping {days, from, to, min_idle}")
        return None
    m = r.mapping(value, path, ("days", "from", "to", "min_idle"))
    days = _days(r, m.get("days"), f"{path}.days")
    start = _minute(r, m.get("from"), f"{path}.from", end=False)
    end = _minute(r, m.get("to"), f"{path}.to", end=True)
    count = r.integer(m.get("min_idle"), f"{path}.min_idle")
    if start is None or end is None:
        return None
    if start == end:
        r.problem(path, "from and to must differ (a whole day: use default)")
        return None
    return IdleWindow(start, end, count, days)


def _prediction(r: Reader, value: Any, path: str) -> Prediction | None:
    if value is None:
        return None
    m = r.mapping(value, path, ("window", "lead", "quantile", "max"))
    d = Prediction()
    window = r.duration(m.get("window"), f"{path}.window", d.window)
    lead = r.duration(m.get("lead"), f"{path}.lead", d.lead)
    quantile = m.get("quantile", d.quantile)
    if isinstance(quantile, bool) or not isinstance(quantile, (int, float)) or not 0 < quantile < 1:
        r.problem(f"{path}.quantile", f"must be a number between 0 and 1, got {quantile!r}")
        quantile = d.quantile
    if window <= 0 or lead <= 0:
        r.problem(path, "window and lead must be greater than zero")
    return Prediction(window, lead, float(quantile), r.integer(m.get("max"), f"{path}.max", d.max))


def read_min_idle(r: Reader, value: Any, path: str) -> MinIdle:
    """``min_idle`` from YAML: an integer, or ``{default, schedule: [window, ...], predict}``."""
    if not isinstance(value, dict):
        if isinstance(value, list):
            r.problem(path, "must be an integer or a mapping {default, schedule, predict}")
            return MinIdle()
        return MinIdle(r.integer(value, path, 0))
    m = r.mapping(value, path, ("default", "schedule", "predict"))
    default = r.integer(m.get("default"), f"{path}.default", 0)
    predict = _prediction(r, m.get("predict"), f"{path}.predict")
    raw = m.get("schedule")
    if raw is None and predict is not None:
        return MinIdle(default, (), predict)
    if raw is None or (isinstance(raw, list) and not raw):
        r.problem(f"{path}.schedule", "must be a non-empty list of windows (or use an integer)")
        return MinIdle(default, (), predict)
    windows = r.each(raw, f"{path}.schedule", lambda v, p: _window(r, v, p))
    return MinIdle(default, windows, predict)
