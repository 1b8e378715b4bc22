"""The peers' rules as tables: each row a behaviour of the peer's code as it ships."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from autoscaler.config import parse_config
from autoscaler.sim.drivers import JOBS_PER_AGENT, PeerDriver, equal_knobs_change
from autoscaler.sim.emulator import Emulator
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
    shrink,
)
from autoscaler.sim.trace import parse_trace

NOW = 10_000.0


def busy(n: int, prefix: str = "b") -> list[RunnerView]:
    return [RunnerView(f"{prefix}{i}", 0.0, False, True, None) for i in range(n)]


def idle(n: int, since: float = NOW - 60, launched: float = 0.0) -> list[RunnerView]:
    return [RunnerView(f"i{i}", launched, False, False, since - i) for i in range(n)]


def booting(n: int, in_service: bool = True) -> list[RunnerView]:
    return [RunnerView(f"n{i}", NOW - 10 - i, True, False, None, in_service) for i in range(n)]


def view(
    runners: list[RunnerView],
    queued: int = 0,
    running: int | None = None,
    lo: int = 0,
    hi: int = 50,
    desired: int = -1,
) -> TypeView:
    running = sum(1 for r in runners if r.busy) if running is None else running
    return TypeView(NOW, queued, running, tuple(runners), lo, hi, desired)


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
        Busy(busy(8) + idle(2), 10, -1e9, 13, 3, 0),
        Busy(busy(5) + idle(5), 10, -1e9, 10, 0, 0),
        Busy(busy(2) + idle(8), 10, -1e9, 7, 0, 3),
        Busy(busy(2) + idle(8), 10, NOW - 60, 10, 0, 0),
        Busy(busy(45) + idle(3), 48, -1e9, 50, 2, 0),
        Busy(idle(1), 1, -1e9, 1, 0, 0),
    ],
    ids=[
        "80%-busy-grows-by-1.3",
        "between-30%-and-80%-holds",
        "under-30%-shrinks-to-0.7",
        "no-scale-down-10min-after-a-scale-up",
        "clamped-to-max",
        "floor-at-min-replicas",
    ],
)
def test_percent_busy_with_the_code_defaults(case: Busy) -> None:
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


@dataclass(frozen=True)
class Agents:
    runners: list[RunnerView]
    queued: int
    params: JobsPerAgentParams
    scaled_out_at: float
    launch: int


@pytest.mark.parametrize(
    "case",
    [
        Agents([], 5, JobsPerAgentParams(), -1e9, 5),
        Agents(busy(2), 3, JobsPerAgentParams(), -1e9, 3),
        Agents(busy(2), 3, JobsPerAgentParams(), NOW - 299, 0),
        Agents(busy(2), 3, JobsPerAgentParams(scale_out_cooldown=0), NOW - 1, 3),
        Agents(booting(4), 4, JobsPerAgentParams(), -1e9, 1),
        Agents(booting(4, in_service=False), 4, JobsPerAgentParams(), -1e9, 0),
        Agents(busy(2), 3, JobsPerAgentParams(instance_buffer=2), -1e9, 5),
        Agents(idle(3), 0, JobsPerAgentParams(), -1e9, 0),
    ],
    ids=[
        "scheduled-jobs",
        "scheduled-plus-running",
        "within-the-5-minute-scale-out-cooldown",
        "no-cooldown-scales-out-at-once",
        "agents-missing-on-in-service-instances-ask-one-more",
        "pending-instances-are-not-judged-for-availability",
        "instance-buffer-while-jobs-exist",
        "never-scales-in-itself",
    ],
)
def test_jobs_per_agent(case: Agents) -> None:
    action, memory = jobs_per_agent(
        view(case.runners, queued=case.queued), case.params, JobsPerAgentMemory(case.scaled_out_at)
    )
    assert action == PeerAction(launch=case.launch)
    assert (memory.scaled_out_at == NOW) is (case.launch > 0)


def test_a_buildkite_agent_idle_for_the_period_terminates_its_own_instance() -> None:
    """The scaler's poll at 10 s sees the job; the instance runs at 20 s, registers at
    80 s, runs the job to 90 s, and its agent stops 600 s later, on its own timer."""
    c = parse_config(
        {
            "github": {"owner": "o", "token": "t"},
            "runner_types": {"cpu": {"labels": ["cpu"], "pools": ["p1"]}},
            "simulation": {
                "boot_time": {"p50": "60s", "p95": "60s"},
                "launch_time": {"p50": "10s", "p95": "10s"},
            },
        },
        env={},
    )
    em = Emulator(c, parse_trace(['{"created_at": 0, "labels": ["cpu"], "duration": 10}']))
    PeerDriver(em, c, JOBS_PER_AGENT)
    em.start()
    em.clock.run(
        until=lambda: bool(em.instances) and em.instances[0].terminated is not None, limit=2000
    )
    assert em.instances[0].terminated == 690.0


def test_the_hpa_reads_queued_and_running_jobs_within_its_tolerance_and_limits() -> None:
    p = QueueLengthParams()
    hold, _ = hpa_step(view(busy(10), queued=0, running=10), p, QueueLengthMemory())
    assert hold == PeerAction()  # exactly on target
    near, _ = hpa_step(view(busy(20), queued=1, running=20), p, QueueLengthMemory())
    assert near == PeerAction()  # 21 / 20 is within 10%
    up, _ = hpa_step(view(busy(1), queued=20, running=1), p, QueueLengthMemory())
    assert up.launch == 3  # max(2 x 1, 4) = 4 replicas this sync
    up, _ = hpa_step(view(busy(10), queued=30, running=10), p, QueueLengthMemory())
    assert up.launch == 10  # 2 x 10


def test_the_hpa_scales_down_to_the_highest_recommendation_of_the_last_5_minutes() -> None:
    p = QueueLengthParams()
    quiet = view(idle(6), queued=0, running=0)
    action, memory = hpa_step(quiet, p, QueueLengthMemory(((NOW - 120, 6),)))
    assert action == PeerAction() and memory.recent[-1] == (NOW, 0)
    action, _ = hpa_step(quiet, p, QueueLengthMemory(((NOW - 300, 6),)))
    assert len(action.terminate) == 5  # the window passed; the HPA keeps one replica


def test_keda_activates_from_zero_and_scales_to_zero_after_its_cooldown() -> None:
    p = QueueLengthParams()
    action, memory = keda_step(view([], queued=2, running=0), p, QueueLengthMemory())
    assert action.launch == 1 and memory.active_at == NOW
    cooling = QueueLengthMemory(active_at=NOW - 299)
    assert keda_step(view(idle(1)), p, cooling)[0] == PeerAction()
    action, _ = keda_step(view(idle(1)), p, QueueLengthMemory(active_at=NOW - 300))
    assert action.terminate == ("i0",)


@pytest.mark.parametrize(
    ("params", "runners", "still_queued", "result"),
    [
        (PerEventParams(), busy(3), True, (1, False)),
        (PerEventParams(), busy(3), False, (0, False)),
        (PerEventParams(), busy(10), True, (0, False)),
        (PerEventParams(ephemeral=True), busy(3), False, (1, False)),
        (PerEventParams(ephemeral=True), busy(10), True, (0, True)),
    ],
    ids=[
        "persistent-one-runner-per-queued-job",
        "persistent-job-no-longer-queued-creates-nothing",
        "persistent-at-the-maximum-drops-the-event",
        "ephemeral-skips-the-queued-check",
        "ephemeral-at-the-maximum-hands-the-message-back",
    ],
)
def test_terraform_aws_github_runner_scale_up(
    params: PerEventParams,
    runners: list[RunnerView],
    still_queued: bool,
    result: tuple[int, bool],
) -> None:
    assert per_event_scale_up(view(runners, hi=10), params, still_queued) == result


def test_an_ephemeral_message_at_a_maximum_still_owed_goes_back_to_sqs_not_lost() -> None:
    """A 150-job matrix on a type of max 120: one activity launched some, the group owed
    the rest. Counting only live instances, the 121st message asked for one more, the
    group at its maximum launched nothing, and the message was neither served nor handed
    back: its job waited for the replay's 7-day drain."""
    owed = view(busy(3), hi=10, desired=10)
    assert per_event_scale_up(owed, PerEventParams(ephemeral=True), True) == (0, True)


def test_terraform_aws_github_runner_scale_down_counts_from_launch() -> None:
    p = PerEventParams()
    runners = [*idle(1, launched=NOW - 301), RunnerView("young", NOW - 100, False, False, NOW)]
    assert per_event_scale_down(view(runners + busy(1)), p) == PeerAction(terminate=("i0",))
    pooled = PerEventParams(pool_size=3)
    assert per_event_pool(view(idle(1) + booting(1)), pooled) == PeerAction(launch=1)
    assert per_event_pool(view(idle(3)), pooled) == PeerAction()


@pytest.mark.parametrize(
    ("runners", "queued", "min_runners", "result"),
    [
        ([], 3, 0, PeerAction(launch=3)),
        (busy(2), 1, 0, PeerAction(launch=1)),
        (busy(2) + idle(2), 0, 1, PeerAction(terminate=("i1",))),
        (busy(49), 5, 0, PeerAction(launch=1)),
    ],
    ids=["one-runner-per-assigned-job", "running-jobs-count", "idle-beyond-min-runners-go", "max"],
)
def test_scale_set_targets_min_runners_plus_assigned_jobs(
    runners: list[RunnerView], queued: int, min_runners: int, result: PeerAction
) -> None:
    assert scale_set(view(runners, queued=queued), ScaleSetParams(min_runners)) == result


def test_shrinking_deletes_booting_then_longest_idle_never_busy() -> None:
    v = view(busy(2) + idle(2) + booting(2))
    assert shrink(v, 3) == ("n0", "n1", "i1")
    assert set(shrink(v, 10)) == {"n0", "n1", "i0", "i1"}


KNOBS = Knobs(poll_interval=30.0, reaction=None, idle_timeout=120.0, min_idle=2)
REACTING = Knobs(poll_interval=30.0, reaction=1.5, idle_timeout=120.0, min_idle=0)


@pytest.mark.parametrize(
    ("shipped", "knobs", "equal"),
    [
        (
            PerEventParams(),
            KNOBS,
            PerEventParams(scale_down_interval=30, minimum_running_time=120, pool_size=2),
        ),
        (PerEventParams(ephemeral=True), REACTING, None),
        (
            PercentBusyParams(),
            KNOBS,
            PercentBusyParams(sync_period=30, scale_down_delay=120, min_replicas=2),
        ),
        (ScaleSetParams(), KNOBS, ScaleSetParams(min_runners=2)),
        (
            JobsPerAgentParams(),
            KNOBS,
            JobsPerAgentParams(interval=30, scale_in_idle_period=120, instance_buffer=2),
        ),
        (
            QueueLengthParams(),
            KNOBS,
            QueueLengthParams(hpa_sync=30, polling_interval=30, stabilization=120, cooldown=120),
        ),
    ],
    ids=[
        "tfa-sweep-every-poll-min-running-time-and-pool",
        "tfa-webhook-delay-becomes-the-reaction",
        "arc-sync-and-scale-down-delay",
        "scale-set-min-runners",
        "buildkite-poll-idle-period-and-buffer-cooldown-kept",
        "keda-hpa-sync-and-windows",
    ],
)
def test_equal_knobs_give_each_peer_this_projects_settings_where_it_has_them(
    shipped: object, knobs: Knobs, equal: object
) -> None:
    got = equalized(shipped, knobs)
    if equal is None:
        assert isinstance(got, PerEventParams) and got.delay_webhook_event == 1.5
        assert got.ephemeral and got.minimum_running_time == 120
    else:
        assert got == equal


@pytest.mark.parametrize(
    ("peer", "min_idle", "changes"),
    [("scale-set", 0, False), ("scale-set", 2, True), ("jobs-per-agent", 0, True)],
    ids=["scale-set-min-runners-already-zero", "scale-set-gets-min-idle", "buildkite-poll"],
)
def test_equal_knobs_change_only_what_differs(peer: str, min_idle: int, changes: bool) -> None:
    c = parse_config(
        {
            "github": {"owner": "o", "token": "t"},
            "runner_types": {"cpu": {"labels": ["cpu"], "pools": ["p1"], "min_idle": min_idle}},
        },
        env={},
    )
    assert equal_knobs_change(c, peer) is changes
