"""The duration grammar (pure): one grammar for every duration key of the configuration.

One or more ``<number><unit>`` parts, units ``d``, ``h``, ``m``, ``s``, ``ms``, largest
first, each at most once (``30s``, ``5m``, ``1h30m``, ``1.5h``, ``500ms``, ``0s``). A bare
number (``30``, ``"90"``) is refused: is it seconds or minutes? No duration may exceed
:data:`MAX_DURATION`. Pure and free of pydantic: code outside the configuration parses
the same text (``simulate --sweep``, the job history's ``--since``) and messages print
durations back in it.
"""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_UNIT_ORDER = tuple(_UNITS)
DURATION_HINT = "a duration like 30s, 5m or 4h"
#: The longest duration any key accepts (a longer one overflows date arithmetic, and no
#: timeout, interval or back-off of a CI controller is meaningfully longer).
MAX_DURATION = 365 * 86400.0
#: The same grammar for the JSON Schema (ECMA-262): each unit at most once, largest first.
DURATION_PATTERN = "^(?=.)" + "".join(f"([0-9]+([.][0-9]+)?{u})?" for u in _UNIT_ORDER) + "$"


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


def why_not_a_duration(text: str) -> str:
    """What is wrong with a duration that does not parse, when it is a common slip."""
    text = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return f": a bare number has no unit (write {text}s for seconds, {text}m for minutes)"
    if _DURATION_PART.sub("", text) == "" and text:
        return ": units go largest first, each once (1h30m, not 30m1h)"
    return ""
