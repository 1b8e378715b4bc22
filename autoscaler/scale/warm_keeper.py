"""Warm pools, applied: each tick, the listed groups' warm pools made what ``pools`` says.

:class:`WarmPoolKeeper` describes the warm pools of the groups listed under ``pools``,
asks :func:`~autoscaler.scale.warm.plan_warm_pools` what differs, and puts or deletes
warm pools through the :class:`~autoscaler.ports.WarmPools` port, every call through the
one retry policy; a failed call is told the way the scaler tells its own. It records
the warm instances per group and state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

from autoscaler.config import Config
from autoscaler.domain import (
    WARM_INSTANCE_STATES,
    ScalingProblem,
    WarmPoolSpec,
    WarmPoolState,
)
from autoscaler.errors import AutoscalerError
from autoscaler.ports import WarmPools
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.warm import KEEP, PUT, WarmPoolChange, WarmPoolView, plan_warm_pools
from autoscaler.telemetry import Metrics

#: Tells a failed call (the scaler's ``report_problem``): problems, the error, runner
#: type, pool, operation.
Report = Callable[[list[ScalingProblem], AutoscalerError, str, str, str], None]


class WarmPoolKeeper:
    """Describes, plans and applies the listed groups' warm pools each tick."""

    def __init__(
        self,
        pools: WarmPools,
        config: Config,
        metrics: Metrics,
        retry: RetryPolicy,
        report: Report,
    ) -> None:
        self.pools = pools
        self.report = report
        self.config = config
        self.metrics = metrics
        self.retry = retry
        self.last: tuple[WarmPoolView, ...] = ()

    def step(
        self,
        existing: Sequence[str],
        problems: list[ScalingProblem],
        *,
        dry_run: bool = False,
        sized: Mapping[str, WarmPoolSpec] | None = None,
    ) -> tuple[WarmPoolView, ...]:
        """Make the warm pools of the listed groups in ``existing`` (the groups described
        this tick) what the configuration says, and the ``size: slo`` ones what the
        policy decided (``sized``, by group); ``dry_run``: describe only."""
        found = self.describe(existing, problems)
        return self.apply(found, problems, dry_run=dry_run, sized=sized)

    def describe(
        self, existing: Sequence[str], problems: list[ScalingProblem]
    ) -> dict[str, WarmPoolState | None]:
        """The warm pools of the listed groups in ``existing``; a group whose describe
        failed is left out (and told)."""
        types = {p: rt.name for rt in self.config.runner_types for p in rt.pools}
        found: dict[str, WarmPoolState | None] = {}
        for pool in self.config.pools:
            if pool.name not in existing:
                continue
            try:
                found[pool.name] = self.retry.call(
                    partial(self.pools.describe_warm_pool, pool.name),
                    pool=pool.name,
                    operation="describe_warm_pool",
                )
            except AutoscalerError as exc:
                self.report(
                    problems, exc, types.get(pool.name, ""), pool.name, "describe_warm_pool"
                )
        return found

    def apply(
        self,
        found: Mapping[str, WarmPoolState | None],
        problems: list[ScalingProblem],
        *,
        dry_run: bool = False,
        sized: Mapping[str, WarmPoolSpec] | None = None,
    ) -> tuple[WarmPoolView, ...]:
        """Put or delete what differs from the warm pools ``found`` (:meth:`describe`);
        ``dry_run``: nothing."""
        views = []
        for change in plan_warm_pools(self.config, found, sized):
            done = change.action == KEEP or (not dry_run and self._apply(change, problems))
            views.append(WarmPoolView(change, found[change.pool], done))
        self.last = tuple(views)
        self._record()
        return self.last

    def _apply(self, change: WarmPoolChange, problems: list[ScalingProblem]) -> bool:
        spec = change.spec
        try:
            if change.action == PUT and spec is not None:
                self.retry.call(
                    lambda: self.pools.put_warm_pool(change.pool, spec),
                    pool=change.pool,
                    operation="put_warm_pool",
                )
            else:
                self.retry.call(
                    lambda: self.pools.delete_warm_pool(change.pool),
                    pool=change.pool,
                    operation="delete_warm_pool",
                )
        except AutoscalerError as exc:
            self.report(
                problems, exc, change.runner_type, change.pool, f"{change.action}_warm_pool"
            )
            return False
        return True

    def _record(self) -> None:
        """Warm instances per group and state; the configured minimum."""
        m = self.metrics
        for view in self.last:
            rt, pool, found = view.change.runner_type, view.change.pool, view.found
            for state in WARM_INSTANCE_STATES:
                m.warm_pool_instances.labels(rt, pool, state).set(
                    0 if found is None else found.count(state)
                )
            spec = view.change.spec
            m.warm_pool_min_size.labels(rt, pool).set(0 if spec is None else spec.min_size)
