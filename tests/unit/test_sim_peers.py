"""The peers' rules as tables: each row a documented behaviour of the peer."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

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
    shrink,
)

NOW = 10_000.0


def busy(n: int, prefix: str = "b") -> list[RunnerView]:
    return [RunnerView(f"{prefix}{i}", 0.0, False, True, None) for i in range(n)]


def idle(n: int, since: float = NOW - 60, launched: float = 0.0) -> list[RunnerView]:
    return [RunnerView(f"i{i}", launched, False, False, since - i) for i in range(n)]


def booting(n: int) -> list[RunnerView]:
    return [RunnerView(f"n{i}", NOW - 10 - i, True, False, None) for i in range(n)]


def view(
    runners: list[RunnerView],
    queued: int = 0,
    running: int | None = None,
    lo: int = 0,
    hi: int = 50,
) -> TypeView:
    running = sum(1 for r in runners if r.busy) if running is None else running
    return TypeView(NOW, queued, running, tuple(runners), lo, hi)


@dataclass(frozen=True)
class Busy:
    runners: list[RunnerView]
    desired: int
    scaled_up_at: float
    want: int
    launch: int
    terminated: int


@pytest.mark.parametrize(
    "case",
    [
        Busy(busy(3) + idle(1), 4, -1e9, 8, 4, 0),
        Busy(busy(1) + idle(3), 4, -1e9, 4, 0, 0),
        Busy(idle(4), 4, -1e9, 2, 0, 2),
        Busy(idle(4), 4, NOW - 60, 4, 0, 0),
        Busy(busy(40) + idle(2), 42, -1e9, 50, 8, 0),
        Busy(idle(1), 1, -1e9, 1, 0, 0),
    ],
    ids=[
        "75%-busy-doubles",
        "between-thresholds-holds",
        "under-25%-halves",
        "anti-flap-10min-after-scale-up",
        "clamped-to-max",
        "floor-at-min",
    ],
)
def test_percent_busy(case: Busy) -> None:
    action, memory = percent_busy(
        view(case.runners, lo=1),
        PercentBusyParams(),
        PercentBusyMemory(case.desired, case.scaled_up_at),
    )
    assert memory.desired == case.want
    assert action.launch == case.launch and len(action.terminate) == case.terminated
    assert not set(action.terminate) & {r.instance_id for r in case.runners if r.busy}


def test_percent_busy_with_zero_replicas_never_scales_up() -> None:
    """0 busy / 0 desired is undefined: ARC leaves the count alone."""
    action, memory = percent_busy(view([], queued=9), PercentBusyParams(), PercentBusyMemory(0))
    assert memory.desired == 0 and action == PeerAction()


@pytest.mark.parametrize(
    ("runners", "queued", "launch", "terminate"),
    [
        ([], 5, 5, ()),
        (busy(2), 3, 3, ()),
        (idle(2, since=NOW - 601), 0, 0, ("i0", "i1")),
        (idle(2, since=NOW - 590), 0, 0, ()),
    ],
    ids=[
        "scheduled-jobs",
        "scheduled-plus-running",
        "idle-600s-terminates",
        "idle-under-600s-stays",
    ],
)
def test_jobs_per_agent(
    runners: list[RunnerView], queued: int, launch: int, terminate: tuple[str, ...]
) -> None:
    action = jobs_per_agent(view(runners, queued=queued), JobsPerAgentParams())
    assert action == PeerAction(launch, terminate)


def test_jobs_per_agent_counts_agents_per_instance() -> None:
    action = jobs_per_agent(view([], queued=5), JobsPerAgentParams(agents_per_instance=2))
    assert action.launch == 3


def test_queue_length_scales_up_at_once_and_down_to_the_highest_of_the_last_5_minutes() -> None:
    p = QueueLengthParams()
    action, memory = queue_length(view(busy(2), queued=4), p, QueueLengthMemory())
    assert action.launch == 4
    quiet = view(idle(6), queued=0, running=0)
    action, memory = queue_length(quiet, p, QueueLengthMemory(((NOW - 120, 6),)))
    assert action == PeerAction() and memory.recent[-1] == (NOW, 0)
    action, _ = queue_length(quiet, p, QueueLengthMemory(((NOW - 300, 6),)))
    assert len(action.terminate) == 6  # the window passed: cooled down to zero


def test_ephemeral_creates_one_runner_per_queued_event_up_to_the_maximum() -> None:
    p = EphemeralParams()
    assert ephemeral_scale_up(view(busy(3), queued=1, hi=10), p) == PeerAction(launch=1)
    assert ephemeral_scale_up(view(busy(10), queued=1, hi=10), p) == PeerAction()


def test_ephemeral_scale_down_removes_idle_runners_older_than_the_minimum_running_time() -> None:
    p = EphemeralParams()
    runners = [*idle(1, launched=NOW - 301), RunnerView("young", NOW - 100, False, False, NOW)]
    assert ephemeral_scale_down(view(runners + busy(1)), p) == PeerAction(terminate=("i0",))


def test_ephemeral_pool_tops_idle_runners_up_to_its_size() -> None:
    p = EphemeralParams(pool_size=3)
    assert ephemeral_pool(view(idle(1) + booting(1)), p) == PeerAction(launch=1)
    assert ephemeral_pool(view(idle(3)), p) == PeerAction()


def test_shrinking_deletes_booting_then_longest_idle_never_busy() -> None:
    v = view(busy(2) + idle(2) + booting(2))
    assert shrink(v, 3) == ("n0", "n1", "i1")
    assert set(shrink(v, 10)) == {"n0", "n1", "i0", "i1"}
