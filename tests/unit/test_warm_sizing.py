"""Hot and warm capacity sized from the queue-time objective (``warm_pool.size: slo``).

The type's objective is 95% of jobs within 45 s; its warm pool's instances start in 40 s
(a slow one) and the group prepares a new one in 2 min. With webhooks the controller
decides 1.2 s after a job is queued, with polling alone 30 s after (the poll interval).
A steady stream is 6 jobs a minute, one observation a minute, for the whole 15-minute
window: 0.1 jobs a second.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.app.explain import WarmRow
from autoscaler.config import Config
from autoscaler.domain import WarmPoolSpec
from autoscaler.scale.plan import ScalingState
from autoscaler.scale.policy import decide
from autoscaler.scale.sizing import size_types, size_warm
from tests.factories import load_config
from tests.unit.scaling_fakes import pool, snapshot

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
CPU = ["self-hosted", "cpu"]
OBJECTIVE = {"queue_time": "45s", "objective": 0.95}
WEBHOOK = {"secret": "s"}


def config(*, webhook: bool = True, objective: dict[str, Any] = OBJECTIVE, **warm: Any) -> Config:
    return load_config(
        poll_interval="30s",
        runner_types={"cpu": {"labels": CPU, "pools": ["p"], "slo": objective}},
        pools={"p": {"warm_pool": {"size": "slo", **warm}}},
        **({"webhook": WEBHOOK} if webhook else {}),
    )


def watched(arrivals: tuple[tuple[float, int], ...] = (), **extra: Any) -> ScalingState:
    """A state that watched the type for an hour; ``arrivals``: (seconds ago, jobs)."""
    seen = tuple((NOW - timedelta(seconds=ago), n) for ago, n in arrivals)
    return ScalingState(watching_since=NOW - timedelta(hours=1), arrivals={"cpu": seen}, **extra)


STEADY = tuple((60.0 * k, 6) for k in range(15))


@pytest.mark.parametrize(
    ("cfg", "state", "hot", "warm", "reason"),
    [
        pytest.param(
            config(),
            watched(),
            0,
            0,
            "hot 0, warm 0: p95 arrivals in the next boot = 0; a warm start fits in 45s",
            id="no-arrivals",
        ),
        pytest.param(
            config(),
            watched(STEADY),
            0,
            18,
            "hot 0, warm 18: p95 arrivals in the next boot = 18; a warm start fits in 45s",
            id="steady-webhook-all-warm",
        ),
        pytest.param(
            config(objective={"queue_time": "45s", "objective": 0.9}),
            watched(STEADY),
            0,
            18,
            "hot 0, warm 18: most arrivals seen in the next boot = 18; a warm start fits in 45s",
            id="steady-webhook-p90-the-most-seen-wins",
        ),
        pytest.param(
            config(webhook=False),
            watched(STEADY),
            12,
            10,
            "hot 12, warm 10: p95 arrivals in the next boot = 22;"
            " p95 arrivals in a warm start = 12",
            id="steady-polling-hot-and-warm",
        ),
        pytest.param(
            config(start="30s", refill="4m"),
            watched(STEADY),
            0,
            32,
            "hot 0, warm 32: p95 arrivals in the next boot = 32; a warm start fits in 45s",
            id="slower-refill-more-warm",
        ),
        pytest.param(
            config(),
            watched(((300.0, 40),)),
            0,
            40,
            "hot 0, warm 40: most arrivals seen in the next boot = 40; a warm start fits in 45s",
            id="a-matrix-is-not-poisson",
        ),
        pytest.param(
            config(),
            watched(warm_held={"cpu": (25, NOW - timedelta(hours=1))}),
            0,
            25,
            "hot 0, warm 25: p95 arrivals in the next boot = 0; a warm start fits in 45s;"
            " 25 warm held (needed 11:00 UTC)",
            id="held-an-hour-after",
        ),
        pytest.param(
            config(),
            watched(warm_held={"cpu": (25, NOW - timedelta(hours=7))}),
            0,
            0,
            "hot 0, warm 0: p95 arrivals in the next boot = 0; a warm start fits in 45s",
            id="hold-expired",
        ),
    ],
)
def test_sizing_from_the_objective(
    cfg: Config, state: ScalingState, hot: int, warm: int, reason: str
) -> None:
    sizing = size_warm(cfg, cfg.runner_types[0], state, NOW)
    assert sizing is not None
    assert (sizing.pool, sizing.hot, sizing.warm, sizing.reason) == ("p", hot, warm, reason)


@pytest.mark.parametrize(
    ("warm", "desired", "size"),
    [
        pytest.param({}, 0, 18, id="as-decided"),
        pytest.param({"min_size": 20}, 0, 20, id="at-least-min-size"),
        pytest.param({"max_prepared": 25}, 10, 15, id="within-max-prepared-beside-desired"),
        pytest.param({"max_prepared": 25, "min_size": 2}, 30, 2, id="min-size-wins"),
    ],
)
def test_the_decided_size_is_put_within_the_configured_bounds(
    warm: dict[str, Any], desired: int, size: int
) -> None:
    cfg = config(**warm)
    sizing = size_warm(cfg, cfg.runner_types[0], watched(STEADY), NOW)
    assert sizing is not None and sizing.warm == 18
    pool = cfg.pool("p").warm_pool
    assert pool is not None
    assert pool.spec_for(sizing.warm, desired) == WarmPoolSpec("stopped", size, size, False)


def test_no_sizing_without_a_sized_pool() -> None:
    cfg = load_config(
        runner_types={"cpu": {"labels": CPU, "pools": ["p"], "slo": OBJECTIVE}},
        pools={"p": {"warm_pool": {"min_size": 3}}},
    )
    assert size_warm(cfg, cfg.runner_types[0], watched(STEADY), NOW) is None
    assert size_types(cfg, watched(STEADY), NOW) == ({}, watched(STEADY))


def test_a_size_needed_is_held_from_then_and_a_held_one_keeps_its_time() -> None:
    cfg = config()
    _, state = size_types(cfg, watched(STEADY), NOW)
    assert state.warm_held == {"cpu": (18, NOW)}
    later = NOW + timedelta(minutes=30)
    sized, after = size_types(cfg, replace(state, arrivals={}), later)
    assert sized["cpu"].warm == 18 and sized["cpu"].needed == 0
    assert after.warm_held == {"cpu": (18, NOW)}


def test_hot_runners_join_the_demand_and_the_plan_carries_the_warm_size() -> None:
    """Polling alone: 12 hot runners are demand (scale up +12 with nothing queued); the
    warm pool is put to 10 beside the 12 the group will have, its reason in the
    decision."""
    cfg = config(webhook=False)
    plan = decide(
        snapshot(at=NOW),
        [],
        {"p": pool("p", max_size=50, desired=0)},
        cfg,
        replace(watched(STEADY), observed_at=NOW - timedelta(seconds=30)),
        NOW,
        observation_fresh=True,
    )
    [d] = plan.decisions
    assert (d.action, d.desired) == ("scale_up", 12)
    assert "min_idle/hot 12" in d.reason
    assert "hot 12, warm 10: p95 arrivals in the next boot = 22" in d.reason
    [w] = plan.warm_sizes
    assert (w.pool, w.hot, w.warm, w.spec) == ("p", 12, 10, WarmPoolSpec("stopped", 10, 10, False))


def test_explain_and_the_page_say_the_split_and_why() -> None:
    cfg = config()
    sizing = size_warm(cfg, cfg.runner_types[0], watched(STEADY), NOW)
    assert sizing is not None
    row = WarmRow(sizing.spec, None, "put", "create", done=True, sizing=sizing)
    assert row.text() == (
        "stopped, min 18, max prepared 18; warm: no instances (put: create); sized: hot 0,"
        " warm 18: p95 arrivals in the next boot = 18; a warm start fits in 45s"
    )
    assert row.as_dict()["sized"] == {
        "pool": "p",
        "hot": 0,
        "warm": 18,
        "warm_pool_size": 18,
        "reason": sizing.reason,
    }
