"""Runners the controller deleted are not deleted again from an older runner list.

Between webhook reconciles a tick answers jobs from the webhook index but plans with the
last poll's runner list (``Observation.runners_observed_at`` says when it was read). These
tests drive the scaler with such webhook-mode observations over hand-written fakes at the
ports (:mod:`tests.unit.scaling_fakes`), and the policy's memory as a table.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import AwsConfig, RetryConfig
from autoscaler.domain import Observation, Runner
from autoscaler.errors import TransientError
from autoscaler.scale.plan import Decision, ScalingState
from autoscaler.scale.policy import decide, without_removed
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import (
    GPU,
    T0,
    FakePool,
    FakeSource,
    config,
    iid,
    inst,
    pool,
    rtype,
    runner,
    snapshot,
)

CFG = config(rtype(pools=("gpu-spot", "gpu-od"))).model_copy(
    update={"aws": AwsConfig(retry=RetryConfig(max_attempts=3))}
)


class CountingSource(FakeSource):
    """The fake GitHub port, counting every DELETE it is asked for (404s included)."""

    def __init__(self, runners: dict[int, Runner]) -> None:
        super().__init__(runners)
        self.deletes: list[int] = []

    def remove_runner(self, runner_id: int) -> None:
        self.deletes.append(runner_id)
        super().remove_runner(runner_id)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def make(source: FakeSource, fake: FakePool | None = None) -> tuple[Scaler, FakePool]:
    fake = fake or FakePool({"gpu-spot": pool("gpu-spot"), "gpu-od": pool("gpu-od")})
    registry = CollectorRegistry()
    s = Scaler(
        fake,
        source,
        CFG,
        Metrics(registry),
        sleep=lambda _: None,
        rng=random.Random(0),
        **handover_ports(source),
    )
    return s, fake


def webhook_tick(
    s: Scaler, runners: tuple[Runner, ...], *, list_read_at: datetime, now: datetime
) -> list[Decision]:
    """One tick as the webhook source answers it: jobs as of ``now``, the runner list of
    the poll at ``list_read_at``."""
    obs = Observation(now, (), runners, runners_observed_at=list_read_at)
    return s.step(snapshot({GPU: 0}, at=now), obs, now, observation_fresh=True)


def already_gone(s: Scaler, pool_name: str) -> float:
    labels = {"runner_type": GPU, "pool": pool_name}
    name = "ci_autoscaler_runner_deletions_already_gone_total"
    return s.metrics.registry.get_sample_value(name, labels) or 0.0


def test_webhook_ticks_on_the_last_poll_s_list_delete_an_offline_runner_once() -> None:
    """From the closing note: in webhook mode an offline runner whose instance was gone
    was deleted at the first tick, then again at every webhook tick until the next
    reconcile: each of those ticks planned with the last poll's runner list, which still
    showed the runner, and GitHub answered 404 each time. The scaler now remembers the
    deletion until a runner list read after it arrives."""
    stale_runner = runner(9, "gpu-od", online=False)
    source = CountingSource({9: stale_runner})
    s, _ = make(source)
    poll_list = (stale_runner,)
    webhook_tick(s, poll_list, list_read_at=T0, now=T0)
    for seconds in (5, 10, 15, 20):  # webhook ticks; the last poll's list is from T0
        webhook_tick(s, poll_list, list_read_at=T0, now=at(seconds))
    assert source.deletes == [9]
    assert already_gone(s, "gpu-od") == 0
    # the next reconcile's list no longer has it: the memory is dropped
    webhook_tick(s, (), list_read_at=at(30), now=at(30))
    assert s.state.removed_runners == {}
    assert source.deletes == [9]


def test_a_404_on_delete_is_counted_as_already_gone_not_a_problem() -> None:
    """Someone (a person, another controller) deleted the offline runner first: GitHub's
    404 means the job is done. It was logged as gone but counted nowhere; now it is
    counted in ``runner_deletions_already_gone_total``, raises no problem for on-call,
    and is remembered like a deletion of our own, so the stale list asks only once."""
    stale_runner = runner(9, "gpu-od", online=False)
    source = CountingSource({})  # GitHub no longer has it
    s, _ = make(source)
    for seconds in (0, 5, 10):
        webhook_tick(s, (stale_runner,), list_read_at=T0, now=at(seconds))
    assert source.deletes == [9]
    assert already_gone(s, "gpu-od") == 1
    assert s.last_problems == []


def test_a_scale_in_from_the_stale_list_is_not_repeated_while_termination_is_pending() -> None:
    """The same stale list also showed an idle runner scaled in a tick ago (deregistered,
    its termination throttled and pending): it was planned for scale-in again, deleted
    again (404), and the instance "left to the orphan sweep". Now it is planned without."""
    idle = runner(1, "gpu-spot")
    fake = FakePool({"gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot")]), "gpu-od": pool("gpu-od")})
    source = CountingSource({1: idle})
    s, _ = make(source, fake)
    webhook_tick(s, (idle,), list_read_at=T0, now=T0)  # idle since T0
    fake.fail("terminate_instance", "gpu-spot", *[TransientError("throttled", code="x")] * 6)
    webhook_tick(s, (idle,), list_read_at=at(601), now=at(601))  # scale-in; terminate fails
    assert source.deletes == [1] and iid(1) in s.state.pending_terminations
    webhook_tick(s, (idle,), list_read_at=at(601), now=at(611))
    assert source.deletes == [1]
    assert already_gone(s, "gpu-spot") == 0


@pytest.mark.parametrize(
    ("removed_at", "list_read_at", "planned", "remembered"),
    [
        pytest.param(at(10), at(0), [], [9], id="deleted-after-the-list-was-read-skipped"),
        pytest.param(at(0), at(0), [], [9], id="deleted-in-the-tick-that-read-the-list-skipped"),
        pytest.param(at(0), at(10), [9], [], id="a-newer-list-still-showing-it-wins"),
    ],
)
def test_without_removed(
    removed_at: datetime, list_read_at: datetime, planned: list[int], remembered: list[int]
) -> None:
    """The policy's rule, as a table: a deletion at or after the list's time hides the
    runner and is kept; an older one is forgotten (a list read since is GitHub's word)."""
    state = ScalingState(removed_runners={9: removed_at})
    state, runners = without_removed(state, [runner(9, "gpu-od", online=False)], list_read_at)
    assert [r.id for r in runners] == planned
    assert list(state.removed_runners) == remembered


@pytest.mark.parametrize(
    ("list_read_at", "stale"),
    [
        pytest.param(at(0), [], id="webhook-tick-on-the-old-list-plans-no-delete"),
        pytest.param(at(20), [9], id="a-poll-after-the-delete-that-lists-it-plans-one"),
    ],
)
def test_decide_plans_with_when_the_runner_list_was_read(
    list_read_at: datetime, stale: list[int]
) -> None:
    """``decide`` judges the memory against ``runners_seen_at``, not the tick's time."""
    pools = {"gpu-spot": pool("gpu-spot"), "gpu-od": pool("gpu-od")}
    plan = decide(
        snapshot({}, at=at(20)),
        [runner(9, "gpu-od", online=False)],
        pools,
        CFG,
        ScalingState(removed_runners={9: at(5)}),
        at(20),
        observation_fresh=True,
        runners_seen_at=list_read_at,
    )
    assert [r.runner_id for r in plan.stale_runners] == stale
