"""`once` (not a dry run) against moto's server applies the ``pools`` section's warm pools;
taking ``warm_pool`` out removes the warm pool; `explain` shows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autoscaler.sim.fleet import PoolSpec, aws_clients, create_pools
from tests.e2e.harness import CPU, GPU, ONE_TICK, cli, free_port, seeded_github, write_config

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture
def moto_url(moto_endpoint: str) -> str:
    autoscaling, ec2 = aws_clients(moto_endpoint)
    create_pools(
        autoscaling,
        ec2,
        [
            PoolSpec("ci-cpu", "linux.4xlarge", tuple(CPU), max_size=5),
            PoolSpec("ci-gpu", "linux.g5.4xlarge.nvidia.gpu", tuple(GPU), max_size=5),
        ],
    )
    return moto_endpoint


def configured(tmp: Path, github_url: str, aws_url: str, pools: dict[str, Any], **cpu: Any) -> Path:
    return write_config(
        tmp,
        github_url,
        free_port(),
        **ONE_TICK,
        runner_types={
            "linux.4xlarge": {"labels": CPU, "pools": ["ci-cpu"], "mode": "ephemeral", **cpu},
            "linux.g5.4xlarge.nvidia.gpu": {"labels": GPU, "pools": ["ci-gpu"]},
        },
        scaling={"enabled": True},
        aws={"region": "us-east-1", "endpoint_url": aws_url},
        pools=pools,
    )


def warm_pool(aws_url: str, group: str) -> dict[str, Any] | None:
    autoscaling, _ = aws_clients(aws_url)
    found: dict[str, Any] | None = autoscaling.describe_warm_pool(AutoScalingGroupName=group).get(
        "WarmPoolConfiguration"
    )
    return found


def test_once_puts_the_warm_pool_and_taking_it_out_removes_it(
    tmp_path: Path, moto_url: str
) -> None:
    fake = seeded_github(gpu_jobs=0)
    try:
        on = configured(
            tmp_path,
            fake.url,
            moto_url,
            {"ci-cpu": {"warm_pool": {"state": "stopped", "min_size": 2, "max_prepared": 4}}},
        )
        first = cli("once", "--config", str(on), env=AWS_ENV)
        put = warm_pool(moto_url, "ci-cpu")
        explain = ("explain", "linux.4xlarge", "--config", str(on))
        explained = cli(*explain, "--output", "json", env=AWS_ENV)
        text = cli(*explain, env=AWS_ENV)
        off = configured(tmp_path, fake.url, moto_url, {"ci-cpu": {"warm_pool": None}})
        second = cli("once", "--config", str(off), env=AWS_ENV)
    finally:
        fake.stop()
    assert first.returncode == 0, first.stderr
    assert put is not None and put["MinSize"] == 2
    assert second.returncode == 0, second.stderr
    assert warm_pool(moto_url, "ci-cpu") is None, "warm_pool taken out: the warm pool is removed"

    assert explained.returncode == 0, explained.stderr
    [pool] = json.loads(explained.stdout)["runner_types"][0]["pools"]
    assert pool["warm_pool"] == {
        "state": "stopped",
        "min_size": 2,
        "max_prepared": 4,
        "reuse": False,
        "instances": {},
        "action": "keep",
        "done": True,
        "sized": None,
    }
    assert text.returncode == 0, text.stderr
    assert "  warm pool ci-cpu: stopped, min 2, max prepared 4; warm: no instances" in text.stdout
    assert warm_pool(moto_url, "ci-gpu") is None, "a group not listed is never touched"


def test_once_leaves_describe_warm_pool_showing_the_configured_state_and_sizes(
    tmp_path: Path, moto_url: str
) -> None:
    fake = seeded_github(gpu_jobs=0)
    try:
        config = configured(
            tmp_path,
            fake.url,
            moto_url,
            {"ci-cpu": {"warm_pool": {"state": "hibernated", "min_size": 1, "max_prepared": 3}}},
        )
        result = cli("once", "--config", str(config), env=AWS_ENV)
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    found = warm_pool(moto_url, "ci-cpu")
    assert found is not None
    assert (found["PoolState"], found["MinSize"], found["MaxGroupPreparedCapacity"]) == (
        "Hibernated",
        1,
        3,
    )
    assert found["InstanceReusePolicy"] == {"ReuseOnScaleIn": False}


def test_once_puts_a_warm_pool_sized_from_the_objective_at_the_decided_size(
    tmp_path: Path, moto_url: str
) -> None:
    """``size: slo``: the policy decides the warm size (a first tick has no arrival rate
    yet: none, so ``min_size``) and the keeper puts it as an absolute size."""
    fake = seeded_github(gpu_jobs=0)
    try:
        config = configured(
            tmp_path,
            fake.url,
            moto_url,
            {"ci-cpu": {"warm_pool": {"size": "slo", "min_size": 2, "max_prepared": 4}}},
            slo={"queue_time": "45s", "objective": 0.95},
        )
        result = cli("once", "--config", str(config), "--output", "json", env=AWS_ENV)
        explained = cli(
            "explain", "linux.4xlarge", "--config", str(config), "--output", "json", env=AWS_ENV
        )
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    [decided] = json.loads(result.stdout)["warm_sizes"]
    assert (decided["runner_type"], decided["pool"], decided["warm_pool_size"]) == (
        "linux.4xlarge",
        "ci-cpu",
        2,
    )
    found = warm_pool(moto_url, "ci-cpu")
    assert found is not None
    assert (found["PoolState"], found["MinSize"], found["MaxGroupPreparedCapacity"]) == (
        "Stopped",
        2,
        2,
    )
    assert explained.returncode == 0, explained.stderr
    [pool] = json.loads(explained.stdout)["runner_types"][0]["pools"]
    sized = pool["warm_pool"]["sized"]
    assert (sized["hot"], sized["warm"], sized["warm_pool_size"]) == (0, 0, 2)
    assert sized["reason"].startswith("hot 0, warm 0: p95 arrivals in the next boot = 0")
    assert (pool["warm_pool"]["min_size"], pool["warm_pool"]["action"]) == (2, "keep")
