"""This project's policy in the emulator: the real :func:`compute_queue` and :func:`decide`.

Every ``poll_interval`` the driver observes the emulator the way the GitHub and Auto
Scaling adapters would, calls the same pure functions the live controller calls, and
carries out the plan ``simulation.poll_latency`` later (the poll's answers are that old
when the tick acts), the way :class:`autoscaler.scale.scaler.Scaler` does: put the warm
pools of the groups listed under ``pools`` (a ``size: slo`` one at its decided size), release pools
whose launches failed, scale up pool by pool (remembering ``scaled_up``), deregister then
terminate idle runners (a runner that took a job meanwhile is refused by GitHub and
stays), terminate orphans. With webhooks (:func:`reaction_of`) it also decides that long
after each queued job, acting at once. Cloud calls cannot fail synchronously here: an
outage shows up later, as a Failed scaling activity, exactly what the policy must notice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.observe.queue import compute_queue
from autoscaler.scale.plan import Plan, ScalingState, slot_target
from autoscaler.scale.policy import decide
from autoscaler.scale.warm import warm_spec
from autoscaler.sim.emulator import Emulator
from autoscaler.sim.entities import SimJob

#: Seconds GitHub takes to deliver a ``workflow_job`` webhook (an assumption: about one).
WEBHOOK_DELIVERY = 1.0


def reaction_of(config: Config) -> float | None:
    """Seconds from a queued job to a decision: ``simulation.reaction``; else, with a
    ``webhook`` configured, its debounce plus :data:`WEBHOOK_DELIVERY`; else None
    (polling alone)."""
    if config.simulation.reaction is not None:
        return config.simulation.reaction
    if config.webhook is not None:
        return config.webhook.debounce + WEBHOOK_DELIVERY
    return None


if TYPE_CHECKING:
    from autoscaler.config import Config


class ProjectDriver:
    """Ticks the real policy against the emulator; counts the cloud calls it makes."""

    def __init__(self, emulator: Emulator, config: Config) -> None:
        self.emulator = emulator
        self.config = config
        self.types = tuple(rt.runner_type for rt in config.runner_types)
        self.state = ScalingState()
        self.ticks = 0
        self._next_tick = 0.0
        self._reaction_at: float | None = None
        self.reaction = reaction_of(config)
        self.latency = min(config.simulation.poll_latency, config.poll_interval)
        if self.reaction is not None:
            emulator.on_queued.append(self._queued)
        emulator.clock.at(0.0, self._periodic)

    def _periodic(self) -> None:
        self._next_tick = self.emulator.now + self.config.poll_interval
        self.emulator.clock.at(self._next_tick, self._periodic)
        self.tick(self.latency)

    def _queued(self, job: SimJob) -> None:
        assert self.reaction is not None
        when = self.emulator.now + self.reaction
        if when >= self._next_tick or (self._reaction_at is not None and self._reaction_at <= when):
            return  # a tick comes soon enough anyway
        self._reaction_at = when
        self.emulator.clock.at(when, self._reacted)

    def _reacted(self) -> None:
        self._reaction_at = None
        self.tick()

    def tick(self, latency: float = 0.0) -> None:
        """Observe now and decide; act ``latency`` seconds later."""
        em = self.emulator
        self.ticks += 1
        now = em.clock.datetime()
        runners = em.runners()
        snapshot = compute_queue(
            [*em.queued_jobs(), *em.started_jobs()],
            runners,
            self.types,
            now,
            self.config.github.hosted_labels,
        )
        plan = decide(
            snapshot,
            runners,
            em.pool_states(),
            self.config,
            self.state,
            now,
            observation_fresh=True,
        )
        self.state = plan.state
        if latency > 0:
            em.clock.after(latency, self._execute, plan)
        else:
            self._execute(plan)

    def _execute(self, plan: Plan) -> None:
        em = self.emulator
        now = em.clock.datetime()
        # The warm pools first (the live scaler puts them before it scales): a scale-out
        # then takes the stopped instances they hold.
        sized = {w.pool: w.spec for w in plan.warm_sizes}
        for listed in self.config.pools:
            pool = em.pools.get(listed.name)
            if pool is not None:
                em.set_warm_pool(pool, warm_spec(listed.name, listed.warm_pool, sized))
        for r in plan.releases:
            if r.desired < r.current:
                em.set_desired(em.pools[r.pool], r.desired)
                em.scale_actions += 1
        for up in plan.scale_ups:
            need = up.need
            for slot in up.slots:
                take, target = slot_target(slot, need)
                if take <= 0:
                    continue
                need -= take
                if target <= slot.current:
                    continue
                em.set_desired(em.pools[slot.pool], target)
                em.scale_actions += 1
                self.state = self.state.scaled_up(slot.pool, now)
        for si in plan.scale_ins:
            inst = em.instance(si.instance_id)
            if inst is None or inst.job is not None:
                continue  # GitHub refuses to remove a busy runner (422): left alone
            em.terminate(inst)
            em.scale_actions += 1
        for o in plan.orphans:
            inst = em.instance(o.instance_id)
            if inst is not None and inst.job is None:
                em.terminate(inst)
                em.scale_actions += 1
