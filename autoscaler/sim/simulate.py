"""Replay a trace through a policy: this project's (``ci-autoscaler``) or a peer's.

``simulate(config, trace, name)`` builds a fresh :class:`Emulator`, attaches the policy's
driver and runs virtual time until the trace's last job completed. Every policy sees the
same jobs, the same boot times per pool (in launch order) and the same outages.
"""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.config import Config
from autoscaler.sim.drivers import PEERS, PeerDriver
from autoscaler.sim.emulator import Emulator
from autoscaler.sim.metrics import PolicyResult, summarize
from autoscaler.sim.project import ProjectDriver
from autoscaler.sim.trace import Trace

PROJECT = "ci-autoscaler"
POLICIES = (PROJECT, *PEERS)


def simulate(config: Config, trace: Trace, name: str = PROJECT, *, label: str = "") -> PolicyResult:
    """One replay. ``label`` names the result (default: the policy's name)."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    em = Emulator(config, trace)
    if name == PROJECT:
        ProjectDriver(em, config)
    else:
        PeerDriver(em, config, name)
    end = em.run()
    return summarize(label or name, em, end)


def simulate_all(
    config: Config, trace: Trace, names: Sequence[str] = POLICIES
) -> list[PolicyResult]:
    return [simulate(config, trace, name) for name in names]
