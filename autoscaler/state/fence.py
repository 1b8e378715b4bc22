"""The gate every leader-only action passes right before it happens.

The controller decides at the start of a tick whether it acts (a follower's tick runs as
a dry run), but a tick can take many seconds (retries, a slow GitHub) and the lease can
end inside it. So each action that only the leader may take asks again, right before its
call: :class:`FencedPool` wraps the :class:`~autoscaler.ports.RunnerPool` port (scale up
or down, protect, terminate), :class:`FencedWarmPools` the
:class:`~autoscaler.ports.WarmPools` port (put, delete), :class:`FencedSource` the
:class:`~autoscaler.ports.JobSource` port (deregister a runner), and the deliverer asks
:meth:`Fence.allows` before each notification. An action refused raises
:class:`~autoscaler.errors.NotLeaderError` (a DeferredError: the scaler leaves it to the
next tick, whose leader decides afresh) and is counted
(``ci_autoscaler_fenced_actions_total{action}``). Reads pass through: a follower
describes the pools and polls GitHub like the leader, so it takes over with a warm picture.

Pure: the lease is asked through :class:`~autoscaler.state.port.Leadership`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from autoscaler.domain import Observation, PoolState, Runner, WarmPoolSpec, WarmPoolState
from autoscaler.errors import NotLeaderError
from autoscaler.ports import JobSource, Leadership, RunnerPool, WarmPools

log = logging.getLogger(__name__)


class Fence:
    """:class:`~autoscaler.state.port.ActionGate` over a :class:`Leadership`."""

    def __init__(
        self,
        leadership: Leadership,
        *,
        on_refused: Callable[[str], None] = lambda action: None,
        name: str = "the state table",
    ) -> None:
        self.leadership = leadership
        self.on_refused = on_refused
        self.name = name

    def allows(self, action: str, detail: str = "") -> bool:
        """True when the action may go ahead now; logged with the epoch it is taken under
        (who acted when can be read back from the logs), or counted when refused."""
        token = self.leadership.token()
        if token is not None:
            log.info("epoch %d: %s %s", token[1], action, detail)
            return True
        self.on_refused(action)
        return False

    def require(self, action: str, detail: str = "") -> None:
        """Return if the action may go ahead; raise NotLeaderError if not."""
        if not self.allows(action, detail):
            log.info("%s skipped: this controller does not hold the lease", action)
            raise NotLeaderError(
                f"{action}: this controller does not hold the leader lease on {self.name} "
                "with its safety margin left; the leader acts",
                path=self.name,
                code="not_leader",
                operation=action,
            )


class FencedPool:
    """A RunnerPool whose changes happen only while the lease is held with its margin."""

    def __init__(self, pool: RunnerPool, fence: Fence) -> None:
        self.pool = pool
        self.fence = fence

    def describe(self, names: Sequence[str]) -> dict[str, PoolState]:
        return self.pool.describe(names)

    def set_desired_capacity(self, pool: str, desired: int) -> None:
        self.fence.require("set_desired_capacity", f"{pool} {desired}")
        self.pool.set_desired_capacity(pool, desired)

    def protect_instances(self, pool: str, instance_ids: Sequence[str]) -> None:
        self.fence.require("protect", f"{pool} {len(instance_ids)}")
        self.pool.protect_instances(pool, instance_ids)

    def terminate_instance(self, pool: str, instance_id: str) -> None:
        self.fence.require("terminate", f"{pool} {instance_id}")
        self.pool.terminate_instance(pool, instance_id)

    def clock_skew(self) -> float | None:
        return self.pool.clock_skew()


class FencedWarmPools:
    """Warm pools (the scaling stage's ``WarmPools`` port) changed only while the lease is
    held with its margin."""

    def __init__(self, pools: WarmPools, fence: Fence) -> None:
        self.pools = pools
        self.fence = fence

    def describe_warm_pool(self, pool: str) -> WarmPoolState | None:
        return self.pools.describe_warm_pool(pool)

    def put_warm_pool(self, pool: str, spec: WarmPoolSpec) -> None:
        self.fence.require("put_warm_pool", pool)
        self.pools.put_warm_pool(pool, spec)

    def delete_warm_pool(self, pool: str) -> None:
        self.fence.require("delete_warm_pool", pool)
        self.pools.delete_warm_pool(pool)


class FencedSource:
    """A JobSource that deregisters runners only while the lease is held with its margin."""

    def __init__(self, source: JobSource, fence: Fence) -> None:
        self.source = source
        self.fence = fence

    def observe(self, now: datetime) -> Observation:
        return self.source.observe(now)

    def remove_runner(self, runner_id: int) -> None:
        self.fence.require("remove_runner", str(runner_id))
        self.source.remove_runner(runner_id)

    def find_runner(self, name: str) -> Runner | None:
        return self.source.find_runner(name)
