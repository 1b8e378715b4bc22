"""Benchmark: how long the CLI takes to start, against an interpreter that imports nothing.

In pairs, one right after the other so both see the same machine: ``python -c pass``,
then a command. The commands: ``ci-autoscaler --help`` (the console script) and
``check-config config.example.yaml``, ours, and today's code path beside them (the
package at :data:`~bench.steady_tick.BASELINE`, run as ``python -m autoscaler`` from a
tree of its own). Both packages are byte-compiled first, as ``make`` does at install:
the machines set ``PYTHONDONTWRITEBYTECODE``, so an import never writes one.

Reported per command: the median over :data:`PAIRS` pairs of the command's wall time
over the bare interpreter's, and the same for CPU time (user + system, steadier on a
shared machine). Aims (:mod:`bench.aims`): ours ``--help`` at most :data:`HELP_AIM`
times bare Python (wall, timed); ``--help`` imports none of the libraries a command
loads when it runs, and ``check-config`` none but pydantic and YAML (counts, read from
``python -X importtime``).
"""

from __future__ import annotations

import compileall
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import aims
from bench.steady_tick import BASELINE, ROOT, baseline_tree

PAIRS = 10
HELP_AIM = 3.0
EXAMPLE = ROOT / "config.example.yaml"
#: The rule files today's example reads.
RULE_FILES = ("alerts/rules/queue.yaml",)
ENV = {**os.environ, "GITHUB_TOKEN": "x", "PYTHONDONTWRITEBYTECODE": "1"}
#: Libraries only a running command needs: the AWS and HTTP clients, the served
#: application, the metrics exposition, the controller and the simulator.
RUNTIME_ONLY = (
    "boto3",
    "botocore",
    "httpx",
    "msgspec",
    "uvicorn",
    "starlette",
    "prometheus_client",
    "autoscaler.controller",
    "autoscaler.sim",
    "autoscaler.app.served",
)
#: What ``--help`` may import beyond the interpreter's own start.
HELP_ONLY = ("pydantic", "yaml", *RUNTIME_ONLY)


@dataclass(frozen=True)
class Times:
    wall: float
    cpu: float


def timed(argv: list[str], cwd: Path) -> Times:
    """One run: its wall time and its CPU time (user + system, the child's own)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Times(wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def ratios(argv: list[str], cwd: Path) -> Times:
    """The median over :data:`PAIRS` pairs of ``argv`` over ``python -c pass``."""
    walls, cpus = [], []
    for _ in range(PAIRS):
        bare = timed([sys.executable, "-c", "pass"], cwd)
        ours = timed(argv, cwd)
        walls.append(ours.wall / bare.wall)
        cpus.append(ours.cpu / max(bare.cpu, 1e-6))
    return Times(statistics.median(walls), statistics.median(cpus))


def imported(argv: list[str], cwd: Path) -> set[str]:
    """The modules ``python -X importtime ARGV`` imports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {line.rsplit("|", 1)[1].strip() for line in lines[1:]}


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Of ``names``, those ``modules`` holds (a package or any module under it)."""
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def run() -> bool:
    today = baseline_tree(BASELINE)
    # Today's check-config reads today's example (ours has keys it never knew), and the
    # rule files that example names.
    for name in (EXAMPLE.name, *RULE_FILES):
        shown = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{BASELINE}:{name}"], check=True, capture_output=True
        )
        (today / name).parent.mkdir(parents=True, exist_ok=True)
        (today / name).write_bytes(shown.stdout)
    for package in (ROOT / "autoscaler", today / "autoscaler"):
        compileall.compile_dir(package, quiet=1)
    script = str(Path(sys.executable).with_name("ci-autoscaler"))
    module = [sys.executable, "-m", "autoscaler"]
    args = ["-m", "autoscaler"]
    commands: dict[str, tuple[list[str], Path | None]] = {
        "ci-autoscaler --help": ([script, "--help"], None),
        "python -m autoscaler --help": ([*module, "--help"], today),
        "check-config config.example.yaml": ([*module, "check-config", str(EXAMPLE)], today),
    }
    print(
        f"cli_start: a command's time over python -c pass's, median of {PAIRS} pairs "
        f"(wall / CPU); today = {BASELINE[:10]}"
    )
    print(f"  {'':34} {'today':>15} {'ours':>15}")
    results: dict[str, Times] = {}
    for name, (argv, tree) in commands.items():
        ours = ratios(argv, ROOT)
        theirs = (
            [str(tree / EXAMPLE.name) if a == str(EXAMPLE) else a for a in argv] if tree else []
        )
        before = "" if tree is None else _cell(ratios(theirs, tree))
        results[name] = ours
        print(f"  {name:34} {before:>15} {_cell(ours):>15}", flush=True)
    print(f"  load average {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    help_ratio = results["ci-autoscaler --help"].wall
    met = aims.timed(
        f"ci-autoscaler --help at most {HELP_AIM:g}x python -c pass ({help_ratio:.1f}x)",
        help_ratio <= HELP_AIM,
    )
    extra = loaded(imported([*args, "--help"], ROOT), HELP_ONLY)
    met &= aims.count(f"--help imports none of {', '.join(HELP_ONLY)} ({extra})", not extra)
    extra = loaded(imported([*args, "check-config", str(EXAMPLE)], ROOT), RUNTIME_ONLY)
    met &= aims.count(f"check-config imports no runtime library ({extra})", not extra)
    return met


def _cell(times: Times) -> str:
    return f"{times.wall:.1f}x / {times.cpu:.1f}x"


if __name__ == "__main__":
    sys.exit(0 if run() else 1)
