"""Peers in the emulator: each rule of :mod:`autoscaler.sim.peers` on its own schedule.

A driver builds each runner type's :class:`TypeView` from the emulator, calls the pure rule
and carries out its :class:`PeerAction`: terminate the named (never busy) instances, and
launch into the first pool of the type with capacity left and no outage (the first pool
when every one is out: its group launches once the outage ends).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autoscaler.sim.emulator import DEFAULT_MAX_SIZE, Emulator, SimJob
from autoscaler.sim.peers import (
    EphemeralParams,
    JobsPerAgentParams,
    PeerAction,
    PercentBusyMemory,
    PercentBusyParams,
    QueueLengthMemory,
    QueueLengthParams,
    RunnerView,
    TypeView,
    ephemeral_pool,
    ephemeral_scale_down,
    ephemeral_scale_up,
    jobs_per_agent,
    percent_busy,
    queue_length,
)

if TYPE_CHECKING:
    from autoscaler.config import Config

EPHEMERAL, PERCENT_BUSY, JOBS_PER_AGENT, QUEUE_LENGTH = (
    "ephemeral-per-job",
    "percent-busy",
    "jobs-per-agent",
    "queue-length",
)
PEERS = (EPHEMERAL, PERCENT_BUSY, JOBS_PER_AGENT, QUEUE_LENGTH)


class PeerDriver:
    """Runs one peer's rule for every runner type that has pools."""

    def __init__(self, emulator: Emulator, config: Config, name: str) -> None:
        if name not in PEERS:
            raise ValueError(f"unknown peer policy {name!r}")
        self.emulator = emulator
        self.name = name
        self.types = [t for t in range(len(config.runner_types)) if emulator.pools_of[t]]
        self.min_size: dict[int, int] = {}
        self.max_size: dict[int, int] = {}
        for t in self.types:
            rt = config.runner_types[t]
            cap = sum(p.max_size for p in emulator.pools_of[t]) or DEFAULT_MAX_SIZE
            self.max_size[t] = min(cap, rt.max) if rt.max is not None else cap
            self.min_size[t] = min(rt.min_idle.default, self.max_size[t])
        if name == EPHEMERAL:
            self.ephemeral = EphemeralParams()
            emulator.ephemeral = True
            emulator.on_queued.append(self._queued)
            self._every(self.ephemeral.scale_down_interval, self._scale_down)
            if self.ephemeral.pool_size > 0:
                self._every(self.ephemeral.scale_down_interval, self._pool)
        elif name == PERCENT_BUSY:
            self.busy_params = PercentBusyParams()
            for t in self.types:  # minReplicas >= 1: with 0 the rule never scales up
                self.min_size[t] = max(1, self.min_size[t])
            self.busy_memory = {t: PercentBusyMemory(self.min_size[t]) for t in self.types}
            self._every(self.busy_params.sync_period, self._percent_busy)
        elif name == JOBS_PER_AGENT:
            self.agent_params = JobsPerAgentParams()
            self._every(self.agent_params.interval, self._jobs_per_agent)
        else:
            self.queue_params = QueueLengthParams()
            self.queue_memory = {t: QueueLengthMemory() for t in self.types}
            self._every(self.queue_params.polling_interval, self._queue_length)

    def _every(self, interval: float, step: Callable[[], None]) -> None:
        def tick() -> None:
            self.emulator.clock.after(interval, tick)
            step()

        self.emulator.clock.at(0.0, tick)

    def view(self, t: int) -> TypeView:
        em = self.emulator
        runners = tuple(
            RunnerView(i.id, i.launched, i.ready is None, i.job is not None, i.idle_since)
            for pool in em.pools_of[t]
            for i in pool.live.values()
        )
        return TypeView(
            em.now, em.queued_home[t], em.running[t], runners, self.min_size[t], self.max_size[t]
        )

    def apply(self, t: int, action: PeerAction) -> None:
        em = self.emulator
        for iid in action.terminate:
            inst = em.instance(iid)
            if inst is not None and inst.job is None:
                em.terminate(inst)
                em.scale_actions += 1
        need = action.launch
        if need <= 0:
            return
        pools = em.pools_of[t]
        open_pools = [p for p in pools if not p.in_outage(em.now)] or pools[:1]
        for pool in open_pools:
            take = min(need, pool.max_size - pool.desired)
            if take > 0:
                em.set_desired(pool, pool.desired + take)
                em.scale_actions += 1
                need -= take
            if need <= 0:
                return

    # --- the peers' schedules
    def _queued(self, job: SimJob) -> None:
        t = job.home
        if t is not None and t in self.max_size:
            self.emulator.clock.after(self.ephemeral.delay_webhook_event, self._scale_up_event, t)

    def _scale_up_event(self, t: int) -> None:
        self.apply(t, ephemeral_scale_up(self.view(t), self.ephemeral))

    def _scale_down(self) -> None:
        for t in self.types:
            self.apply(t, ephemeral_scale_down(self.view(t), self.ephemeral))

    def _pool(self) -> None:
        for t in self.types:
            self.apply(t, ephemeral_pool(self.view(t), self.ephemeral))

    def _percent_busy(self) -> None:
        for t in self.types:
            action, self.busy_memory[t] = percent_busy(
                self.view(t), self.busy_params, self.busy_memory[t]
            )
            self.apply(t, action)

    def _jobs_per_agent(self) -> None:
        for t in self.types:
            self.apply(t, jobs_per_agent(self.view(t), self.agent_params))

    def _queue_length(self) -> None:
        for t in self.types:
            action, self.queue_memory[t] = queue_length(
                self.view(t), self.queue_params, self.queue_memory[t]
            )
            self.apply(t, action)
