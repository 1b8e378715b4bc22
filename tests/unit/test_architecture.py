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
import json
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
    "autoscaler.retry.model",
    "autoscaler.retry.classify",
    "autoscaler.retry.ledger",
    "autoscaler.retry.decide",
    "autoscaler.alerting.job_retry_alerts",
    "autoscaler.scale.memory",
    "autoscaler.state.port",
    "autoscaler.state.lease",
    "autoscaler.state.fence",
]
FORBIDDEN = ("httpx", "boto3", "botocore", "prometheus_client", "sqlite3", "autoscaler.app")

#: Packages that must never reach into the application shell.
LAYERED = ["observe", "scale", "alerting", "config", "state", "retry", "metric_groups"]
SHARED = [
    "domain.py",
    "errors.py",
    "health.py",
    "ports.py",
    "retrying.py",
    "controller.py",
    "telemetry.py",
]


#: Run in one clean interpreter, which forks a child per module: the child imports the
#: module and reports the forbidden modules it finds loaded. A module found clean is then
#: imported by the parent too, so later children start from it: what a child finds loaded
#: beyond clean modules came from its own module (one start-up and one import of each
#: module in all, not one interpreter per module).
_PROBE = """
import json, os, sys
forbidden = tuple(sys.argv[1].split(","))
out = {}
for module in sys.argv[2:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            __import__(module)
            bad = sorted(m for m in sys.modules
                         if any(m == f or m.startswith(f + ".") for f in forbidden))
            text = ",".join(bad)
        except BaseException as exc:
            text = f"cannot be imported: {exc!r}"
        os.write(w, text.encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    out[module] = b"".join(chunks).decode()
    if not out[module]:
        __import__(module)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def pulled_in() -> dict[str, str]:
    """Pure module -> the forbidden modules importing it pulls in (comma-separated)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(FORBIDDEN), *PURE],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, str] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io_library_nor_the_app(
    module: str, pulled_in: dict[str, str]
) -> None:
    assert pulled_in[module] == "", f"{module} pulls in {pulled_in[module]}"


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
