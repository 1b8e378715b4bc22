"""`ci-autoscaler check-config` as a newcomer runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config.example.yaml"
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def variables_read(text: str) -> set[str]:
    """The ``${VAR}``s in the YAML itself (comments left out)."""
    lines = (line.split(" #", 1)[0] for line in text.splitlines() if not line.startswith("#"))
    return set(ENV_REF.findall("\n".join(lines)))


def check_config(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """check-config in a fresh process whose environment has none of the example's
    variables (a new machine), plus ``env``."""
    example_vars = variables_read(EXAMPLE.read_text())
    clean = {k: v for k, v in os.environ.items() if k not in example_vars}
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", "check-config", *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_example_header_names_every_variable_the_example_reads() -> None:
    """Story: the header said "Validate with: ci-autoscaler check-config
    config.example.yaml", which fails on a machine without GITHUB_TOKEN."""
    text = EXAMPLE.read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))[:2000]
    header = header.split("\npoll_interval", 1)[0]
    used = variables_read(text)
    assert used, "the example reads no variable: this test checks nothing"
    for name in used:
        assert re.search(rf"^#\s+{name}\s+\S", header, re.MULTILINE), f"{name} not in header"
    assert "check-config --allow-unset-env config.example.yaml" in header


def test_example_without_its_variables_fails_and_names_them() -> None:
    lines = EXAMPLE.read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.startswith("  token: ${GITHUB_TOKEN}"))
    done = check_config("config.example.yaml")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "config.example.yaml: 1 problem:",
        f"  line {line}: github.token: environment variable GITHUB_TOKEN is not set",
    ]
    assert done.stdout == ""


def test_allow_unset_env_reports_them_as_warnings_and_passes() -> None:
    done = check_config("--allow-unset-env", "config.example.yaml")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "config.example.yaml: warning: github.token: environment variable GITHUB_TOKEN is "
        "not set (allowed by --allow-unset-env)"
    ]
    assert done.stdout == "config.example.yaml: ok (2 runner types, 2 alert rules, 1 receiver)\n"


def test_the_example_copied_into_an_empty_directory_passes(tmp_path: Path) -> None:
    """Story: the example read its queue rules from ``alerts/rules/*.yaml`` next to it, a
    folder only the repository has; a copy of it alone was refused ("no file matches")."""
    (tmp_path / "config.example.yaml").write_text(EXAMPLE.read_text())
    done = check_config("--allow-unset-env", "config.example.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "config.example.yaml: ok (2 runner types, 2 alert rules, 1 receiver)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.example.yaml"]


def test_allow_unset_env_still_fails_on_real_problems(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "github: {owner: x, token: '${GITHUB_TOKEN}', timeout: 0s}\n"
        "runner_types: {cpu: {labels: [x]}}\n"
    )
    done = check_config("--allow-unset-env", str(bad))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{bad}: 1 problem:",
        "  line 1: github.timeout: must be greater than zero",
    ]


def test_with_its_variables_the_example_passes_without_the_flag() -> None:
    secret = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    done = check_config("config.example.yaml", env={"GITHUB_TOKEN": secret})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert secret not in done.stdout


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            "github: {owner: x, token: t}\nrunner_types: {cpu: {labels: [x]}}\n"
            "alerts: {builtin: {shipped_rules: false}}\n",
            "ok (1 runner type, 0 alert rules, 0 receivers)",
            id="singular-type-plural-zero",
        ),
        pytest.param(
            "github: {owner: x, token: t}\nrunner_types: {a: {labels: [x]}, b: {labels: [y]}}\n"
            "alerts:\n  receivers: {hook: {type: webhook, url: 'https://h'}}\n"
            "  builtin: {shipped_rules: false}\n"
            "  rules: [{name: r, team: t, description: d, receivers: [hook], "
            "max_queue_size: 1}]\n",
            "ok (2 runner types, 1 alert rule, 1 receiver)",
            id="singular-rule-and-receiver",
        ),
    ],
)
def test_counts_read_well(tmp_path: Path, body: str, expected: str) -> None:
    """Story: "1 problem(s)" and "1 receivers"."""
    path = tmp_path / "c.yaml"
    path.write_text(body)
    done = check_config(str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{path}: {expected}\n"


def test_several_problems_are_counted_in_the_plural(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("github: {owner: x}\nrunner_types: {cpu: {labels: []}}\n")
    done = check_config(str(path))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{path}: 2 problems:",
        "  line 1: github: needs either token or app",
        "  line 2: runner_types.cpu.labels: must be a non-empty list",
    ]
