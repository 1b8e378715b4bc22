"""The layout is the loop, and its layers hold.

The rules are import-linter contracts in ``pyproject.toml`` (``make lint`` runs them):
the layers from the shell down to the vocabulary, the pure core free of I/O libraries even
through another module, no stage reaching into another stage's adapter, nothing on the
controller's runtime path importing the simulator, the fakes or the demo, and no import
cycle between sibling modules. This suite runs the same contracts, and checks on its own
that the package graph has no cycle, so a cycle fails ``make test`` too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autoscaler"


def package_graph(package: Path) -> dict[str, set[str]]:
    """Top-level unit (a subpackage or a module of ``package``) -> the units it imports,
    counting every import anywhere in a file (inside functions too)."""
    name = package.name
    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        unit = parts[0]
        if unit == "__init__":
            continue
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        units = {t.split(".")[1] for t in targets if t.startswith(name + ".")}
        graph.setdefault(unit, set()).update(units - {unit})
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_package_graph_has_no_cycle() -> None:
    cycle = find_cycle(package_graph(PACKAGE))
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle(tmp_path: Path) -> None:
    """The check is not vacuous: two subpackages that import each other are a cycle."""
    pkg = tmp_path / "demo_pkg"
    for sub, other in (("a", "b"), ("b", "a")):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
        (pkg / sub / "mod.py").write_text(f"def f():\n    from demo_pkg.{other} import mod\n")
    (pkg / "c.py").write_text("from demo_pkg.a import mod\n")
    graph = package_graph(pkg)
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert find_cycle(graph) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_the_import_contracts_hold() -> None:
    """import-linter's contracts in pyproject.toml, as ``make lint`` runs them."""
    code = (
        "from importlinter.cli import lint_imports; raise SystemExit(lint_imports(no_cache=True))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@pytest.mark.parametrize(
    "init",
    sorted(PACKAGE.rglob("__init__.py")),
    ids=lambda p: str(p.relative_to(PACKAGE.parent)),
)
def test_every_package_says_what_lives_there(init: Path) -> None:
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
    assert doc, f"{init.relative_to(PACKAGE.parent)} has no docstring"
