"""Peers in the emulator: each rule of :mod:`autoscaler.sim.peers` on its own schedule.

A driver builds each runner type's :class:`TypeView` from the emulator, calls the pure rule
and carries out its :class:`PeerAction`: terminate the named (never busy) instances, and
raise the desired capacity of the first pool of the type with capacity left and no
outage (the first pool when every one is out: its group launches once the outage ends).

Schedules, as each peer runs: a poll (Buildkite's scaler, ARC's sync, KEDA and its HPA),
a message per queued job (terraform-aws-github-runner's SQS queue, the scale set's
listener), a timer per idle agent (Buildkite's self-termination). A peer that reads
GitHub's job listings to decide (KEDA's scaler) acts ``simulation.poll_latency`` after
it read them, as this project's controller does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from autoscaler.sim.emulator import DEFAULT_MAX_SIZE, Emulator
from autoscaler.sim.entities import SimInstance, SimJob
from autoscaler.sim.peers import (
    JobsPerAgentMemory,
    JobsPerAgentParams,
    Knobs,
    PeerAction,
    PercentBusyMemory,
    PercentBusyParams,
    PerEventParams,
    QueueLengthMemory,
    QueueLengthParams,
    RunnerView,
    ScaleSetParams,
    TypeView,
    equalized,
    hpa_step,
    jobs_per_agent,
    keda_step,
    per_event_pool,
    per_event_scale_down,
    per_event_scale_up,
    percent_busy,
    scale_set,
)
from autoscaler.sim.project import reaction_of

if TYPE_CHECKING:
    from autoscaler.config import Config


@dataclass(frozen=True)
class Peer:
    """A peer as the simulator runs it: its rule's family and its shipped parameters."""

    name: str
    family: str
    shipped: Any
    summary: str
    """One line for a person: whose rule, how it ships."""


EPHEMERAL, PERSISTENT, PERCENT_BUSY, SCALE_SET, JOBS_PER_AGENT, NO_COOLDOWN, QUEUE_LENGTH = (
    "ephemeral-per-job",
    "per-event-persistent",
    "percent-busy",
    "scale-set",
    "jobs-per-agent",
    "jobs-per-agent-no-cooldown",
    "queue-length",
)

PEER_TABLE: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer(
            EPHEMERAL,
            "per-event",
            PerEventParams(ephemeral=True),
            "terraform-aws-github-runner, ephemeral runners: one instance per queued event"
            " 30 s after it, handed back to SQS at the maximum",
        ),
        Peer(
            PERSISTENT,
            "per-event",
            PerEventParams(),
            "terraform-aws-github-runner as it ships (persistent runners): one instance per"
            " queued event still queued 30 s after it; idle runners swept every 5 min",
        ),
        Peer(
            PERCENT_BUSY,
            "percent-busy",
            PercentBusyParams(),
            "actions-runner-controller legacy PercentageRunnersBusy: x1.3 at 80% busy,"
            " x0.7 under 30%, every minute",
        ),
        Peer(
            SCALE_SET,
            "scale-set",
            ScaleSetParams(),
            "actions-runner-controller gha-runner-scale-set: ephemeral runners,"
            " minRunners + assigned jobs, on each message",
        ),
        Peer(
            JOBS_PER_AGENT,
            "jobs-per-agent",
            JobsPerAgentParams(),
            "buildkite-agent-scaler in the Elastic CI Stack: queued + running every 10 s,"
            " 5 min scale-out cooldown, instances idle 10 min end themselves",
        ),
        Peer(
            NO_COOLDOWN,
            "jobs-per-agent",
            JobsPerAgentParams(scale_out_cooldown=0.0),
            "buildkite-agent-scaler with its binary's default cooldown (0): the rule alone",
        ),
        Peer(
            QUEUE_LENGTH,
            "queue-length",
            QueueLengthParams(),
            "KEDA github-runner scaler and its HPA: queued + in-progress jobs every 15 s,"
            " x2 or +4 a sync, down to the highest of the last 5 min",
        ),
    )
}
PEERS = tuple(PEER_TABLE)


def knobs_of(config: Config) -> list[Knobs]:
    """This project's knobs per runner type (in config order)."""
    react = reaction_of(config)
    return [
        Knobs(config.poll_interval, react, rt.idle_timeout, rt.min_idle.default)
        for rt in config.runner_types
    ]


def equal_knobs_change(config: Config, name: str) -> bool:
    """Whether ``--equal-knobs`` changes anything of peer ``name`` for this config."""
    shipped = PEER_TABLE[name].shipped
    return any(
        equalized(shipped, k) != shipped
        for rt, k in zip(config.runner_types, knobs_of(config), strict=True)
        if rt.pools
    )


class LiveRunners(Sequence[RunnerView]):
    """One runner type's live instances as :class:`RunnerView` items, built on first read.

    A peer that reacts to every queued job (terraform-aws-github-runner, the scale set)
    mostly reads only how many there are; building a view of hundreds of instances per
    message made those replays quadratic in the trace's length."""

    def __init__(self, emulator: Emulator, t: int) -> None:
        self._emulator = emulator
        self._t = t
        self._items: tuple[RunnerView, ...] | None = None

    def _built(self) -> tuple[RunnerView, ...]:
        if self._items is None:
            em, now = self._emulator, self._emulator.now
            self._items = tuple(
                RunnerView(
                    i.id,
                    i.launched,
                    i.ready is None,
                    i.job is not None,
                    i.idle_since,
                    now >= i.running,
                )
                for pool in em.pools_of[self._t]
                for i in pool.live.values()
            )
        return self._items

    def __len__(self) -> int:
        return self._emulator.live_count[self._t]

    @overload
    def __getitem__(self, index: int) -> RunnerView: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[RunnerView]: ...
    def __getitem__(self, index: int | slice) -> RunnerView | Sequence[RunnerView]:
        return self._built()[index]

    def __iter__(self) -> Iterator[RunnerView]:
        return iter(self._built())


class PeerDriver:
    """Runs one peer's rule for every runner type that has pools."""

    def __init__(
        self, emulator: Emulator, config: Config, name: str, *, equal_knobs: bool = False
    ) -> None:
        if name not in PEER_TABLE:
            raise ValueError(f"unknown peer policy {name!r}")
        peer = PEER_TABLE[name]
        self.emulator = emulator
        self.name = name
        self.types = [t for t in range(len(config.runner_types)) if emulator.pools_of[t]]
        knobs = knobs_of(config)
        self.params: dict[int, Any] = {
            t: equalized(peer.shipped, knobs[t]) if equal_knobs else peer.shipped
            for t in self.types
        }
        self.min_size: dict[int, int] = {}
        self.max_size: dict[int, int] = {}
        for t in self.types:
            rt = config.runner_types[t]
            cap = sum(p.max_size for p in emulator.pools_of[t]) or DEFAULT_MAX_SIZE
            self.max_size[t] = min(cap, rt.max) if rt.max is not None else cap
            self.min_size[t] = 0
        self.latency = config.simulation.poll_latency if peer.family == "queue-length" else 0.0
        self.memory: dict[int, Any] = {}
        getattr(self, "_start_" + peer.family.replace("-", "_"))()

    # --- plumbing
    def _every(self, interval: float, step: Callable[[int], None], t: int) -> None:
        def tick() -> None:
            self.emulator.clock.after(interval, tick)
            step(t)

        self.emulator.clock.at(0.0, tick)

    def view(self, t: int) -> TypeView:
        em = self.emulator
        desired = sum(pool.desired for pool in em.pools_of[t])
        return TypeView(
            em.now,
            em.queued_home[t],
            em.running[t],
            LiveRunners(em, t),
            self.min_size[t],
            self.max_size[t],
            desired,
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

    def _act_later(self, t: int, action: PeerAction) -> None:
        if self.latency > 0 and (action.launch or action.terminate):
            self.emulator.clock.after(self.latency, self.apply, t, action)
        else:
            self.apply(t, action)

    # --- terraform-aws-github-runner
    def _start_per_event(self) -> None:
        em = self.emulator
        em.ephemeral = self.params[self.types[0]].ephemeral
        em.on_queued.append(self._queued_event)
        for t in self.types:
            p: PerEventParams = self.params[t]
            self._every(p.scale_down_interval, self._per_event_down, t)

    def _queued_event(self, job: SimJob) -> None:
        t = job.home
        if t is not None and t in self.max_size:
            p: PerEventParams = self.params[t]
            self.emulator.clock.after(p.delay_webhook_event, self._per_event_up, t, job)

    def _per_event_up(self, t: int, job: SimJob) -> None:
        p: PerEventParams = self.params[t]
        launch, requeue = per_event_scale_up(self.view(t), p, job.started is None)
        self.apply(t, PeerAction(launch=launch))
        if requeue:
            self.emulator.clock.after(p.requeue_after, self._per_event_up, t, job)

    def _per_event_down(self, t: int) -> None:
        p: PerEventParams = self.params[t]
        self.apply(t, per_event_scale_down(self.view(t), p))
        if p.pool_size > 0:
            self.apply(t, per_event_pool(self.view(t), p))

    # --- actions-runner-controller, legacy
    def _start_percent_busy(self) -> None:
        for t in self.types:
            p: PercentBusyParams = self.params[t]
            self.min_size[t] = max(p.min_replicas, self.min_size[t])
            self.memory[t] = PercentBusyMemory(self.min_size[t])
            self._every(p.sync_period, self._percent_busy, t)

    def _percent_busy(self, t: int) -> None:
        action, self.memory[t] = percent_busy(self.view(t), self.params[t], self.memory[t])
        self.apply(t, action)

    # --- actions-runner-controller, gha-runner-scale-set
    def _start_scale_set(self) -> None:
        em = self.emulator
        em.ephemeral = True
        em.on_queued.append(self._scale_set_message)
        em.on_done.append(lambda job, inst: self._scale_set_message(job))
        for t in self.types:
            em.clock.at(0.0, self._scale_set, t)  # the session's first statistics

    def _scale_set_message(self, job: SimJob) -> None:
        t = job.home
        if t is not None and t in self.max_size:
            p: ScaleSetParams = self.params[t]
            self.emulator.clock.after(p.message_delay, self._scale_set, t)

    def _scale_set(self, t: int) -> None:
        self.apply(t, scale_set(self.view(t), self.params[t]))

    # --- Buildkite
    def _start_jobs_per_agent(self) -> None:
        self.emulator.on_idle.append(self._agent_idle)
        for t in self.types:
            p: JobsPerAgentParams = self.params[t]
            self.memory[t] = JobsPerAgentMemory()
            self._every(p.interval, self._jobs_per_agent, t)

    def _jobs_per_agent(self, t: int) -> None:
        action, self.memory[t] = jobs_per_agent(self.view(t), self.params[t], self.memory[t])
        self.apply(t, action)

    def _agent_idle(self, inst: SimInstance) -> None:
        t = inst.pool.type_index
        if t in self.params:
            p: JobsPerAgentParams = self.params[t]
            self.emulator.clock.after(
                p.scale_in_idle_period, self._agent_timeout, inst, inst.idle_since
            )

    def _agent_timeout(self, inst: SimInstance, since: float | None) -> None:
        """The agent's idle timer: still idle since then, it stops and its instance
        terminates itself (decrementing the desired count)."""
        t = inst.pool.type_index
        alone = inst.terminated is None and inst.job is None and inst.idle_since == since
        if alone and self.emulator.live_count[t] > self.min_size[t]:
            self.emulator.terminate(inst)
            self.emulator.scale_actions += 1

    # --- KEDA and the HPA
    def _start_queue_length(self) -> None:
        for t in self.types:
            p: QueueLengthParams = self.params[t]
            self.memory[t] = QueueLengthMemory()
            self._every(p.hpa_sync, self._hpa, t)
            self._every(p.polling_interval, self._keda, t)

    def _hpa(self, t: int) -> None:
        action, self.memory[t] = hpa_step(self.view(t), self.params[t], self.memory[t])
        self._act_later(t, action)

    def _keda(self, t: int) -> None:
        action, self.memory[t] = keda_step(self.view(t), self.params[t], self.memory[t])
        self._act_later(t, action)
