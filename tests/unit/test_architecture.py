"""The layout is the loop, and its layers hold.

- The pure core (domain, queue math, scaling decisions, alert rules and lifecycle, the
  tick) pulls in no I/O library, transitively: httpx, boto3/botocore, sqlite3 and
  prometheus_client stay in adapters.
- Nothing in a stage package (observe/, scale/, alerting/) nor in the shared vocabulary
  imports from app/, the shell that wires them together.
- Every package says in its docstring what lives there.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "autoscaler"

PURE = [
    "autoscaler.domain",
    "autoscaler.errors",
    "autoscaler.ports",
    "autoscaler.controller",
    "autoscaler.observe.queue",
    "autoscaler.observe.github.budget",
    "autoscaler.observe.github.webhooks",
    "autoscaler.observe.github.webhook_index",
    "autoscaler.observe.github.webhook_rows",
    "autoscaler.observe.github.webhook_completions",
    "autoscaler.observe.github.reconcile_plan",
    "autoscaler.observe.github.delivery_log",
    "autoscaler.observe.github.answers",
    "autoscaler.observe.github.wire",
    "autoscaler.scale.policy",
    "autoscaler.scale.plan",
    "autoscaler.scale.capacity",
    "autoscaler.scale.diagnosis",
    "autoscaler.scale.causes",
    "autoscaler.scale.pool_causes",
    "autoscaler.scale.view",
    "autoscaler.scale.provisioning",
    "autoscaler.scale.ephemeral",
    "autoscaler.observe.starts",
    "autoscaler.scale.aws.activities",
    "autoscaler.config.schedule",
    "autoscaler.config.durations",
    "autoscaler.config.problems",
    "autoscaler.config.github",
    "autoscaler.config.scaling",
    "autoscaler.config.aws",
    "autoscaler.health",
    "autoscaler.config.secrets",
    "autoscaler.alerting.rules",
    "autoscaler.alerting.evaluation",
    "autoscaler.alerting.builtin_rules",
    "autoscaler.alerting.lifecycle",
    "autoscaler.config.simulation",
    "autoscaler.sim.trace",
    "autoscaler.sim.clock",
    "autoscaler.sim.emulator",
    "autoscaler.sim.entities",
    "autoscaler.sim.project",
    "autoscaler.sim.peers",
    "autoscaler.sim.drivers",
    "autoscaler.sim.metrics",
    "autoscaler.sim.sweep",
    "autoscaler.sim.simulate",
    "autoscaler.sim.shapes",
    "autoscaler.alerting.alertmanager",
    "autoscaler.job_retry.model",
    "autoscaler.job_retry.classify",
    "autoscaler.job_retry.ledger",
    "autoscaler.job_retry.decide",
    "autoscaler.alerting.job_retry_alerts",
    "autoscaler.scale.memory",
    "autoscaler.state.port",
    "autoscaler.state.lease",
    "autoscaler.state.fence",
]
FORBIDDEN = ("httpx", "boto3", "botocore", "prometheus_client", "sqlite3", "autoscaler.app")

#: Packages that must never reach into the application shell.
LAYERED = ["observe", "scale", "alerting", "config", "state", "job_retry"]
SHARED = [
    "domain.py",
    "errors.py",
    "health.py",
    "ports.py",
    "retrying.py",
    "controller.py",
    "telemetry.py",
]


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io_library_nor_the_app(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"forbidden = {FORBIDDEN!r}\n"
        "bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') "
        "for f in forbidden))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"{module} pulls in {out}"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


def _layered_files() -> list[Path]:
    files = [p for pkg in LAYERED for p in sorted((PACKAGE / pkg).rglob("*.py"))]
    return files + [PACKAGE / name for name in SHARED]


@pytest.mark.parametrize("path", _layered_files(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_stage_modules_never_import_the_app_shell(path: Path) -> None:
    bad = sorted(
        m for m in _imports(path) if m == "autoscaler.app" or m.startswith("autoscaler.app.")
    )
    assert bad == [], f"{path.relative_to(PACKAGE.parent)} imports {bad}"


def test_the_architecture_check_would_catch_an_app_import(tmp_path: Path) -> None:
    """The static check itself is not vacuous."""
    bad = tmp_path / "bad.py"
    bad.write_text("from autoscaler.app.cli import main\nimport autoscaler.app.report\n")
    assert _imports(bad) >= {"autoscaler.app.cli", "autoscaler.app.report"}


@pytest.mark.parametrize(
    "init",
    sorted(PACKAGE.rglob("__init__.py")),
    ids=lambda p: str(p.relative_to(PACKAGE.parent)),
)
def test_every_package_says_what_lives_there(init: Path) -> None:
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
    assert doc, f"{init.relative_to(PACKAGE.parent)} has no docstring"
