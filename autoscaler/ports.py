"""Narrow ports owned by the core. Adapters implement them; tests hand-write fakes.

Runner <-> instance convention: a runner's name ends with its EC2 instance id
(``ci-gpu-spot-i-0abc123def4567890``); :func:`instance_id_of` reads it back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from autoscaler.domain import Observation, PoolState, Runner, WarmPoolSpec, WarmPoolState
from autoscaler.secrets import Secret

_INSTANCE_ID = re.compile(r"(i-[0-9a-f]{8,17})$")


def instance_id_of(runner_name: str) -> str | None:
    """The EC2 instance id a runner's name ends with, or None when it carries none."""
    match = _INSTANCE_ID.search(runner_name)
    return match.group(1) if match else None


class Clock(Protocol):
    def now(self) -> datetime: ...


class JobSource(Protocol):
    """The CI provider: queued/in-progress jobs and the self-hosted runners."""

    def observe(self, now: datetime) -> Observation:
        """Poll the provider. Raises TransientError/PermanentError on failure."""
        ...

    def remove_runner(self, runner_id: int) -> None:
        """Deregister a runner. Raises RejectedError when the runner is busy (GitHub 422),
        NotFoundError when the provider no longer knows it (the runner is gone)."""
        ...

    def find_runner(self, name: str) -> Runner | None:
        """The runner registered under exactly ``name`` now, or None. Asked right before an
        orphan instance is terminated: the poll's list may be older than a registration."""
        ...


class RunnerPool(Protocol):
    """Cloud capacity: EC2 Auto Scaling groups, or a fake."""

    def describe(self, names: Sequence[str]) -> dict[str, PoolState]:
        """The named pools; a name that does not exist is absent from the result."""
        ...

    def set_desired_capacity(self, pool: str, desired: int) -> None: ...

    def protect_instances(self, pool: str, instance_ids: Sequence[str]) -> None:
        """Mark instances protected from scale-in so the group never picks a victim."""
        ...

    def terminate_instance(self, pool: str, instance_id: str) -> None:
        """Terminate one instance and decrement the group's desired capacity."""
        ...

    def clock_skew(self) -> float | None:
        """The cloud's clock minus ours, in seconds, from its last answer (None: unknown).
        Instance launch times are the cloud's clock; the policy compares them with ours."""
        ...


@runtime_checkable
class WarmPools(Protocol):
    """Cloud warm pools: EC2 Auto Scaling's (beside a group), or a fake. Runtime-checkable:
    the wiring keeps warm pools only for a pool adapter that has them."""

    def describe_warm_pool(self, pool: str) -> WarmPoolState | None:
        """The group's warm pool, or None when it has none (or it is being deleted)."""
        ...

    def put_warm_pool(self, pool: str, spec: WarmPoolSpec) -> None:
        """Create the group's warm pool, or change it to ``spec``."""
        ...

    def delete_warm_pool(self, pool: str) -> None:
        """Remove the group's warm pool (the cloud terminates its instances)."""
        ...


@dataclass(frozen=True)
class JitRunner:
    """GitHub's answer to generate-jitconfig: the runner it created (offline until its
    machine connects) and its single-use config, a secret handed to that machine only."""

    runner_id: int
    encoded_jit_config: Secret


@dataclass(frozen=True)
class RegistrationToken:
    """GitHub's answer to registration-token: a secret that can register runners (and do
    nothing else) until ``expires_at``, an hour after it was made."""

    token: Secret
    expires_at: datetime


class Leadership(Protocol):
    """Whether this controller may act now (the leader lease, held with its margin)."""

    def acting(self) -> bool: ...

    def token(self) -> tuple[str, int] | None:
        """(owner, epoch) while acting, else None."""
        ...


class ActionGate(Protocol):
    """Asked right before an action that only the leader may take: a scale call, a
    termination, a deregistration, a notification. False: skip it (it is counted)."""

    def allows(self, action: str, detail: str = "") -> bool: ...


class SoleWriter:
    """The gate and leadership of a controller that needs no lease (the SQLite backend:
    its file lock already keeps a second controller out): always acting."""

    def acting(self) -> bool:
        return True

    def allows(self, action: str, detail: str = "") -> bool:
        return True
