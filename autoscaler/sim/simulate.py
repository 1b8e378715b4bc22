"""Replay a trace through a policy: this project's (``ci-autoscaler``) or a peer's.

``simulate(config, trace, name)`` builds a fresh :class:`Emulator`, attaches the policy's
driver and runs virtual time until the trace's last job completed. Every policy sees the
same jobs, the same boot times per pool (in launch order) and the same outages. With
``equal_knobs`` every peer gets this project's poll interval (or reaction), idle timeout
and min_idle wherever it has such a knob (:func:`autoscaler.sim.peers.equalized`).

``ci-autoscaler-ephemeral`` is this project's policy with every runner type in
``mode: ephemeral``: each machine runs one job and is terminated when it ends (the live
controller terminates it at its next tick; here at once), so a user sees on the same
trace what clean machines cost against ``ci-autoscaler`` (persistent) in runner-hours and
queue time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from autoscaler.sim.drivers import PEERS, PeerDriver
from autoscaler.sim.emulator import Emulator
from autoscaler.sim.metrics import PolicyResult, summarize
from autoscaler.sim.project import ProjectDriver
from autoscaler.sim.trace import Trace

if TYPE_CHECKING:
    from autoscaler.config import Config

PROJECT = "ci-autoscaler"
PROJECT_EPHEMERAL = "ci-autoscaler-ephemeral"
POLICIES = (PROJECT, PROJECT_EPHEMERAL, *PEERS)


def as_ephemeral(config: Config) -> Config:
    """The same config with every runner type in ``mode: ephemeral``."""
    from autoscaler.config.jit import EPHEMERAL  # noqa: PLC0415 (the models, once a config is read)

    return config.model_copy(
        update={
            "runner_types": tuple(
                rt.model_copy(update={"mode": EPHEMERAL}) for rt in config.runner_types
            )
        }
    )


def simulate(
    config: Config,
    trace: Trace,
    name: str = PROJECT,
    *,
    label: str = "",
    equal_knobs: bool = False,
) -> PolicyResult:
    """One replay. ``label`` names the result (default: the policy's name)."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    if name == PROJECT_EPHEMERAL:
        config = as_ephemeral(config)
    em = Emulator(config, trace)
    if name in (PROJECT, PROJECT_EPHEMERAL):
        em.ephemeral = name == PROJECT_EPHEMERAL
        ProjectDriver(em, config)
    else:
        PeerDriver(em, config, name, equal_knobs=equal_knobs)
    end = em.run()
    return summarize(label or name, em, end)


def simulate_all(
    config: Config, trace: Trace, names: Sequence[str] = POLICIES, *, equal_knobs: bool = False
) -> list[PolicyResult]:
    return [simulate(config, trace, name, equal_knobs=equal_knobs) for name in names]
