"""``ci-autoscaler simulate``: the table, the JSON keys, the sweep's front, the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.app.cli import main
from autoscaler.sim.simulate import POLICIES

KEYS = {
    "name",
    "p50_queue_seconds",
    "p95_queue_seconds",
    "p99_queue_seconds",
    "runner_hours",
    "idle_runner_hours",
    "oracle_ratio",
    "scale_actions",
    "runner_types",
}


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    config = tmp_path / "c.yaml"
    config.write_text(
        "github: {owner: o, token: t}\n"
        "runner_types:\n"
        "  cpu: {labels: [self-hosted, cpu], pools: [ci-cpu], max: 30}\n"
        "simulation: {boot_time: {p50: 60s, p95: 120s}}\n"
    )
    trace = tmp_path / "t.jsonl"
    lines = [
        json.dumps({"created_at": i * 45.0, "labels": ["self-hosted", "cpu"], "duration": 300})
        for i in range(80)
    ]
    trace.write_text("\n".join(lines) + "\n")
    return str(config), str(trace)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["simulate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_every_policy_with_the_documented_keys(
    files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "--config", files[0], "--trace", files[1], "--output", "json")
    assert code == 0
    body = json.loads(out)
    assert [p["name"] for p in body["policies"]] == list(POLICIES)
    oracle = body["oracle"]["runner_hours"]
    assert oracle > 0 and body["equal_knobs"] is False
    for policy in body["policies"]:
        assert set(policy) >= KEYS
        assert "lower_bound_runner_hours" not in policy  # the per-policy bound is gone
        assert policy["runner_hours"] >= policy["idle_runner_hours"] >= 0
        assert policy["oracle_ratio"] == pytest.approx(policy["runner_hours"] / oracle, abs=5e-3)
        (cpu,) = policy["runner_types"]
        assert cpu["runner_type"] == "cpu" and cpu["jobs"] == 80
    assert body["trace"]["jobs"] == 80


def test_the_oracle_is_reported_per_runner_type_with_its_frontier(
    files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "--config",
        files[0],
        "--trace",
        files[1],
        "--output",
        "json",
        "--policy",
        "ci-autoscaler",
    )
    assert code == 0
    oracle = json.loads(out)["oracle"]
    (cpu,) = oracle["runner_types"]
    assert cpu["runner_type"] == "cpu" and cpu["oracle_runner_hours"] == oracle["runner_hours"]
    assert cpu["busy_hours"] == pytest.approx(80 * 300 / 3600, abs=0.01)
    waits = [p["max_wait_seconds"] for p in oracle["frontier"]]
    hours = [p["runner_hours"] for p in oracle["frontier"]]
    assert waits[0] == 0 and waits == sorted(waits)
    assert hours[0] == oracle["runner_hours"] and hours == sorted(hours, reverse=True)


@pytest.mark.parametrize("policy", ["ci-autoscaler", "queue-length"], ids=["ours", "a-peer"])
def test_two_runner_types_each_have_their_oracle_and_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "github: {owner: o, token: t}\n"
        "runner_types:\n"
        "  cpu: {labels: [self-hosted, cpu], pools: [ci-cpu]}\n"
        "  gpu: {labels: [self-hosted, gpu], pools: [ci-gpu]}\n"
    )
    trace = tmp_path / "t.jsonl"
    lines = [
        json.dumps({"created_at": i * 60.0, "labels": ["self-hosted", kind], "duration": d})
        for i in range(40)
        for kind, d in (("cpu", 300), ("gpu", 1800))
    ]
    trace.write_text("\n".join(lines) + "\n")
    args = ("--config", str(config), "--trace", str(trace), "--policy", policy)
    code, out, _ = run(capsys, *args, "--output", "json")
    assert code == 0
    body = json.loads(out)
    floors = {t["runner_type"]: t["oracle_runner_hours"] for t in body["oracle"]["runner_types"]}
    assert set(floors) == {"cpu", "gpu"} and floors["gpu"] > floors["cpu"] > 0
    assert sum(floors.values()) == pytest.approx(body["oracle"]["runner_hours"], abs=0.02)
    (result,) = body["policies"]
    for t in result["runner_types"]:
        ratio = t["runner_hours"] / floors[t["runner_type"]]
        assert t["oracle_ratio"] == pytest.approx(ratio, abs=5e-3) and ratio >= 1.0
    assert result["oracle_ratio"] == pytest.approx(
        result["runner_hours"] / body["oracle"]["runner_hours"], abs=5e-3
    )


def test_equal_knobs_replay_the_peers_with_this_projects_settings(
    files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("--config", files[0], "--trace", files[1], "--policy", "jobs-per-agent")
    _, shipped, _ = run(capsys, *args, "--output", "json")
    _, equal, _ = run(capsys, *args, "--output", "json", "--equal-knobs")
    assert json.loads(equal)["equal_knobs"] is True
    # a 30 s poll and a 2-minute idle timeout instead of 10 s and 10 minutes
    assert json.loads(equal)["policies"] != json.loads(shipped)["policies"]
    _, table, _ = run(capsys, *args, "--equal-knobs")
    assert "this project's poll interval, idle timeout and min_idle" in table


def test_the_table_shows_the_chosen_policies(
    files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "--config",
        files[0],
        "--trace",
        files[1],
        "--policy",
        "ci-autoscaler",
        "--policy",
        "queue-length",
    )
    assert code == 0
    lines = out.splitlines()
    rows = [
        line.split()[0]
        for line in lines[lines.index(next(x for x in lines if x.startswith("policy"))) + 2 :]
    ]
    assert rows == ["ci-autoscaler", "queue-length"]
    assert "80 jobs over" in out and "boot p50 60s p95 120s" in out
    assert "oracle (every job at once, knowing the future)" in out and "x oracle" in out


def test_a_sweep_prints_its_pareto_front(
    files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "--config",
        files[0],
        "--trace",
        files[1],
        "--sweep",
        "min_idle=0,2",
        "idle_timeout=1m,10m",
        "--output",
        "json",
    )
    assert code == 0
    body = json.loads(out)
    assert len(body["policies"]) == 4
    names = {p["name"] for p in body["policies"]}
    assert body["pareto_front"] and set(body["pareto_front"]) <= names
    code, out, _ = run(capsys, "--config", files[0], "--trace", files[1], "--sweep", "min_idle=0,2")
    assert code == 0 and "Pareto front of 2 settings" in out


def test_plot_writes_an_image(
    files: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "out.png"
    code, _, err = run(
        capsys,
        "--config",
        files[0],
        "--trace",
        files[1],
        "--policy",
        "ci-autoscaler",
        "--plot",
        str(png),
    )
    assert code == 0 and "plot written" in err
    assert png.read_bytes().startswith(b"\x89PNG")


def test_a_bad_trace_line_is_named_and_nothing_runs(
    files: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"created_at": 0, "labels": [], "duration": 1}\n{"created_at": 0}\n')
    code, out, err = run(capsys, "--config", files[0], "--trace", str(bad))
    assert code == 1 and out == "" and f"{bad}:2: " in err


def test_a_config_without_pools_has_nothing_to_simulate(
    tmp_path: Path, files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "observe.yaml"
    config.write_text("github: {owner: o, token: t}\nruntime: 1\n")
    code, _, err = run(capsys, "--config", str(config), "--trace", files[1])
    assert code == 1 and "problem" in err
    config.write_text("github: {owner: o, token: t}\nrunner_types: {cpu: {labels: [cpu]}}\n")
    code, _, err = run(capsys, "--config", str(config), "--trace", files[1])
    assert code == 1 and "no runner type names pools" in err


def test_the_overview_draws_one_panel_per_trace(tmp_path: Path) -> None:
    from autoscaler.app.plot import draw_overview  # noqa: PLC0415
    from autoscaler.sim.metrics import PolicyResult  # noqa: PLC0415

    def result(name: str, p95: float, hours: float) -> PolicyResult:
        return PolicyResult(name, 1, 0, 0, 0.0, p95, p95, 0, hours, 0.0, 0.0, hours, 0, 0, 0.0)

    png = tmp_path / "overview.png"
    traces = [
        (f"trace {i}", [result("a", 60, 10 + i), result("b", 30, 20)], 270.0, 9.0) for i in range(3)
    ]
    draw_overview(traces, str(png), "three traces")
    assert png.read_bytes().startswith(b"\x89PNG")
