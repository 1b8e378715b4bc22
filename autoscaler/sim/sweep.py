"""``--sweep min_idle=0,1,2,4 idle_timeout=5m,10m,20m``: this project's knobs over a grid, and
the Pareto front of (p95 queue time, runner-hours) so a user picks a point.

A knob applies to every runner type (``min_idle`` replaces a schedule with a constant).
Knobs: ``min_idle``, ``idle_timeout``, ``max_scale_in_per_tick``, ``poll_interval`` and
``reaction`` (``none`` for polling only).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoscaler.config import Config
from autoscaler.config.durations import parse_duration
from autoscaler.config.schedule import MinIdle
from autoscaler.config.simulation import SimulationConfig
from autoscaler.sim.metrics import PolicyResult


class SweepError(ValueError):
    """A ``--sweep`` argument that cannot be read."""


def _count(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"not a whole number: {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    return parse_duration(text) if not text.replace(".", "", 1).isdigit() else float(text)


def _optional_seconds(text: str) -> float | None:
    return None if text.lower() in ("none", "null", "off") else _seconds(text)


def _set_min_idle(config: Config, value: object) -> Config:
    assert isinstance(value, int)
    types = tuple(
        rt.model_copy(update={"min_idle": MinIdle(default=value)}) for rt in config.runner_types
    )
    return config.model_copy(update={"runner_types": types})


def _set_idle_timeout(config: Config, value: object) -> Config:
    assert isinstance(value, float)
    types = tuple(rt.model_copy(update={"idle_timeout": value}) for rt in config.runner_types)
    return config.model_copy(update={"runner_types": types})


def _set_scale_in(config: Config, value: object) -> Config:
    assert isinstance(value, int)
    return config.model_copy(
        update={"scaling": config.scaling.model_copy(update={"max_scale_in_per_tick": value})}
    )


def _set_poll(config: Config, value: object) -> Config:
    assert isinstance(value, float)
    return config.model_copy(update={"poll_interval": value})


def _set_reaction(config: Config, value: object) -> Config:
    assert value is None or isinstance(value, float)
    sim: SimulationConfig = config.simulation.model_copy(update={"reaction": value})
    return config.model_copy(update={"simulation": sim})


KNOBS: dict[str, tuple[Callable[[str], object], Callable[[Config, object], Config]]] = {
    "min_idle": (_count, _set_min_idle),
    "idle_timeout": (_seconds, _set_idle_timeout),
    "max_scale_in_per_tick": (_count, _set_scale_in),
    "poll_interval": (_seconds, _set_poll),
    "reaction": (_optional_seconds, _set_reaction),
}


@dataclass(frozen=True)
class Knob:
    name: str
    texts: tuple[str, ...]
    values: tuple[object, ...]


def parse_sweep(args: Sequence[str]) -> list[Knob]:
    """``["min_idle=0,1", "idle_timeout=5m,10m"]`` -> knobs. Raises SweepError."""
    knobs: list[Knob] = []
    for arg in args:
        name, sep, rest = arg.partition("=")
        name = name.strip()
        if not sep or name not in KNOBS:
            raise SweepError(
                f"--sweep {arg!r}: expected KNOB=V1,V2,... with KNOB one of {', '.join(KNOBS)}"
            )
        if any(k.name == name for k in knobs):
            raise SweepError(f"--sweep: {name} given twice")
        texts = tuple(t.strip() for t in rest.split(",") if t.strip())
        if not texts:
            raise SweepError(f"--sweep {arg!r}: no values")
        read = KNOBS[name][0]
        try:
            values = tuple(read(t) for t in texts)
        except ValueError as exc:
            raise SweepError(f"--sweep {arg!r}: {exc}") from None
        knobs.append(Knob(name, texts, values))
    return knobs


def grid(config: Config, knobs: Sequence[Knob]) -> list[tuple[str, Config]]:
    """Every combination: (label like ``min_idle=1 idle_timeout=5m``, its config)."""
    out = []
    for combo in itertools.product(*(range(len(k.values)) for k in knobs)):
        c = config
        parts = []
        for knob, index in zip(knobs, combo, strict=True):
            c = KNOBS[knob.name][1](c, knob.values[index])
            parts.append(f"{knob.name}={knob.texts[index]}")
        out.append((" ".join(parts), c))
    return out


def pareto_front(results: Sequence[PolicyResult]) -> list[PolicyResult]:
    """The results no other beats on both p95 queue time and runner-hours (ties kept),
    cheapest first."""
    front = [
        r
        for r in results
        if not any(
            o.p95_queue_seconds <= r.p95_queue_seconds
            and o.runner_hours <= r.runner_hours
            and (o.p95_queue_seconds < r.p95_queue_seconds or o.runner_hours < r.runner_hours)
            for o in results
        )
    ]
    return sorted(front, key=lambda r: (r.runner_hours, r.p95_queue_seconds))
