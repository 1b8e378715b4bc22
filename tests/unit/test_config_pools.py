"""The ``pools`` section: warm pools per Auto Scaling group, and what check-config refuses.

AWS keeps no warm pool for a group with Spot instances or a mixed instances policy: the
file says how a group buys instances (``capacity``), and a warm pool on a Spot or mixed
group is refused at its line, naming the type's on-demand fallback that can be warm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.config import parse_config, read_config
from autoscaler.domain import WarmPoolSpec
from autoscaler.errors import ConfigError
from tests.factories import config_doc, config_problems, load_config

GPU = ["self-hosted", "gpu"]


def doc(pools: dict[str, Any], mode: str = "ephemeral") -> dict[str, Any]:
    return config_doc(
        runner_types={
            "gpu": {"labels": GPU, "pools": ["ci-gpu-spot", "ci-gpu-od"], "mode": mode},
        },
        pools=pools,
    )


def test_a_warm_pool_is_read_with_its_defaults() -> None:
    config = load_config(
        runner_types={"gpu": {"labels": GPU, "pools": ["ci-gpu-od"]}},
        pools={"ci-gpu-od": {"warm_pool": {"min_size": 2}}},
    )
    pool = config.pool("ci-gpu-od")
    assert pool.warm_pool is not None
    assert pool.warm_pool.spec == WarmPoolSpec("stopped", 2, None, reuse=False)
    assert pool.capacity == "on_demand"


def test_a_group_not_listed_has_no_warm_pool_of_ours() -> None:
    config = load_config(runner_types={"gpu": {"labels": GPU, "pools": ["ci-gpu-od"]}})
    assert config.pools == ()
    assert config.pool("ci-gpu-od").warm_pool is None


@pytest.mark.parametrize(
    ("pools", "mode", "expected"),
    [
        pytest.param(
            {"ci-gpu-spot": {"capacity": "spot", "warm_pool": {"state": "stopped"}}},
            "ephemeral",
            [
                "pools.ci-gpu-spot.warm_pool: needs an on-demand group: AWS keeps no warm pool"
                " for a group with Spot instances or a mixed instances policy (capacity:"
                " spot), so this pool stays cold; its on-demand fallback 'ci-gpu-od' can be"
                " warm"
            ],
            id="spot",
        ),
        pytest.param(
            {
                "ci-gpu-spot": {"capacity": "mixed", "warm_pool": {}},
                "ci-gpu-od": {"capacity": "mixed"},
            },
            "ephemeral",
            [
                "pools.ci-gpu-spot.warm_pool: needs an on-demand group: AWS keeps no warm pool"
                " for a group with Spot instances or a mixed instances policy (capacity:"
                " mixed), so this pool stays cold; an on-demand pool of the type can be warm"
            ],
            id="mixed-no-fallback",
        ),
        pytest.param(
            {"ci-gpu-od": {"warm_pool": {"reuse": True}}},
            "ephemeral",
            [
                "pools.ci-gpu-od.warm_pool.reuse: needs mode: persistent (runner type 'gpu' is"
                " ephemeral: a machine runs one job, and a used one never goes back to the"
                " warm pool)"
            ],
            id="reuse-ephemeral",
        ),
        pytest.param(
            {"ci-gpu-od": {"warm_pool": {"min_size": 5, "max_prepared": 3}}},
            "ephemeral",
            ["pools.ci-gpu-od.warm_pool.min_size: must not exceed max_prepared (3)"],
            id="min-above-max",
        ),
        pytest.param(
            {"ci-gpu-od": {"warm_pool": {"state": "frozen"}}},
            "ephemeral",
            [
                "pools.ci-gpu-od.warm_pool.state: must be one of stopped, hibernated, running,"
                " got 'frozen'"
            ],
            id="bad-state",
        ),
        pytest.param(
            {"ci-cpu": {"warm_pool": {}}},
            "ephemeral",
            ["pools.ci-cpu: not a pool of any runner type"],
            id="unknown-group",
        ),
        pytest.param(
            {"ci-gpu-od": {"warm_pool": {"max_size": 3}}},
            "ephemeral",
            ["pools.ci-gpu-od.warm_pool.max_size: unknown key (did you mean 'min_size'?)"],
            id="unknown-key",
        ),
        pytest.param(
            {"ci-gpu-od": {"warm_pool": {"size": 3}}},
            "ephemeral",
            ["pools.ci-gpu-od.warm_pool.size: must be one of fixed, slo, got 3"],
            id="size-a-number",
        ),
        pytest.param(
            {"ci-gpu-od": {"warm_pool": {"size": "slo"}}},
            "ephemeral",
            [
                "pools.ci-gpu-od.warm_pool.size: slo needs runner type 'gpu' to have an slo"
                " (queue_time and objective): the warm pool is sized to meet it"
            ],
            id="slo-without-objective",
        ),
        pytest.param(
            {"ci-gpu-od": {"warm_pool": {"size": "slo", "start": "0s"}}},
            "ephemeral",
            ["pools.ci-gpu-od.warm_pool.start: must be greater than zero"],
            id="zero-start",
        ),
    ],
)
def test_refused(pools: dict[str, Any], mode: str, expected: list[str]) -> None:
    assert config_problems(doc(pools, mode)) == expected


@pytest.mark.parametrize(
    "pools",
    [
        pytest.param({"ci-gpu-od": {"warm_pool": {"reuse": True}}}, id="reuse-persistent"),
        pytest.param(
            {"ci-gpu-spot": {"capacity": "spot"}, "ci-gpu-od": {"warm_pool": {}}},
            id="spot-cold-fallback-warm",
        ),
    ],
)
def test_accepted(pools: dict[str, Any]) -> None:
    config = parse_config(doc(pools, "persistent"), env={})
    assert config.pool("ci-gpu-od").warm_pool is not None


def sized(pools: dict[str, Any]) -> dict[str, Any]:
    out = doc(pools, "ephemeral")
    out["runner_types"]["gpu"]["slo"] = {"queue_time": "45s", "objective": 0.95}
    return out


@pytest.mark.parametrize(
    ("pools", "expected"),
    [
        pytest.param({"ci-gpu-od": {"warm_pool": {"size": "slo"}}}, [], id="slo-with-objective"),
        pytest.param(
            {
                "ci-gpu-spot": {"warm_pool": {"size": "slo"}},
                "ci-gpu-od": {"warm_pool": {"size": "slo"}},
            },
            [
                "pools.ci-gpu-od.warm_pool.size: slo is already set on 'ci-gpu-spot': the warm"
                " capacity of runner type 'gpu' is sized for one pool"
            ],
            id="slo-on-two-pools",
        ),
    ],
)
def test_sized_from_the_objective(pools: dict[str, Any], expected: list[str]) -> None:
    if expected:
        assert config_problems(sized(pools)) == expected
    else:
        assert parse_config(sized(pools), env={}).pool("ci-gpu-od").warm_pool is not None


def test_a_sized_warm_pool_is_put_as_an_absolute_size_within_its_bounds() -> None:
    config = parse_config(
        sized({"ci-gpu-od": {"warm_pool": {"size": "slo", "min_size": 2, "max_prepared": 10}}}),
        env={},
    )
    warm = config.pool("ci-gpu-od").warm_pool
    assert warm is not None
    assert (warm.start, warm.refill) == (40.0, 120.0)
    sizes = [
        warm.spec_for(decided, desired).min_size
        for decided, desired in [(5, 0), (0, 0), (12, 0), (5, 7), (5, 12)]
    ]
    assert sizes == [5, 2, 10, 3, 2]
    assert warm.spec_for(5, 0) == WarmPoolSpec("stopped", 5, 5, reuse=False)


def test_check_config_tells_the_line_of_a_warm_pool_on_a_spot_group(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "github: {owner: o, token: t}\n"
        "runner_types:\n"
        "  gpu:\n"
        "    labels: [gpu]\n"
        "    pools: [ci-gpu-spot, ci-gpu-od]\n"
        "pools:\n"
        "  ci-gpu-spot:\n"
        "    capacity: spot\n"
        "    warm_pool: {state: stopped, min_size: 2}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        read_config(path, env={})
    assert [p.split(":")[0] for p in caught.value.problems] == ["line 9"]
    assert "pools.ci-gpu-spot.warm_pool: needs an on-demand group" in caught.value.problems[0]
