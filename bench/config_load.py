"""Benchmark: reading a config, and what a command pays before it reads one.

Side by side in one run, at two sizes (``config.example.yaml``; a generated config of 50
runner types, each with pools, a schedule and an objective, and 20 alert rules):

- the load ``check-config`` does (the file read strictly, ``${VAR}``, the rule files,
  pydantic's validation) against parsing the same text alone with the same YAML parser
  (libyaml's), the floor any reader pays;
- in fresh processes: ``ci-autoscaler --help`` (no pydantic) and ``check-config`` against
  an interpreter that imports nothing (``python -c pass``).

Times are CPU time (user + system), the median of several runs: steadier than wall time on
a shared machine. No aim: the table says where a command's start-up time goes.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import yaml

from autoscaler.config import load_config

REPO = Path(__file__).resolve().parents[1]
ENV = {"GITHUB_TOKEN": "x"}
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def big_config(types: int = 50, rules: int = 20) -> str:
    """A config with ``types`` runner types and ``rules`` alert rules."""
    lines = ["poll_interval: 30s", "github:", "  owner: my-org", "  token: ${GITHUB_TOKEN}"]
    lines.append("runner_types:")
    for i in range(types):
        lines += [
            f"  linux.type{i}:",
            f"    labels: [self-hosted, linux.type{i}]",
            f"    pools: [ci-pool-{i}-spot, ci-pool-{i}-ondemand]",
            "    mode: ephemeral",
            "    min_idle:",
            "      default: 1",
            "      schedule:",
            '        - {days: [mon, tue, wed, thu, fri], from: "08:00", to: "18:00", min_idle: 4}',
            "    max: 100",
            "    idle_timeout: 2m",
            "    boot_timeout: 15m",
            "    slo: {queue_time: 5m, objective: 0.95}",
        ]
    lines += ["alerts:", "  receivers:", "    hook: {type: webhook, url: 'https://h.example/x'}"]
    lines.append("  rules:")
    lines += [
        f"    - {{name: r{i}, team: t, description: d, receivers: [hook], max_queue_size: {i}}}"
        for i in range(rules)
    ]
    return "\n".join(lines) + "\n"


def median_ms(run: Callable[[], object], times: int) -> float:
    """The median CPU time of ``run`` in this process, warmed once (imports, pydantic's
    validators built)."""
    run()
    spent = []
    for _ in range(times):
        start = time.process_time()
        run()
        spent.append(time.process_time() - start)
    return 1000 * statistics.median(spent)


def process_ms(*args: str, times: int = 5) -> float:
    """The median CPU time of a fresh ``python ARGS`` (user + system, its own)."""
    env = {**os.environ, **ENV}
    spent = []
    for _ in range(times):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return 1000 * statistics.median(spent)


def run() -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.yaml"
        big.write_text(big_config())
        files = {"config.example.yaml": REPO / "config.example.yaml", "50 runner types": big}
        print("config load, in process (median CPU ms)")
        print(f"  {'file':22} {'load':>8} {'yaml only':>10} {'ratio':>6}")
        for name, path in files.items():
            text = path.read_text()
            load = median_ms(partial(load_config, path, env=ENV), 20)
            floor = median_ms(partial(yaml.load, text, Loader=LOADER), 20)
            print(f"  {name:22} {load:8.1f} {floor:10.1f} {load / floor:6.2f}")
        print("a fresh process (median CPU ms of 5)")
        nothing = process_ms("-c", "pass")
        rows = {
            "python -c pass": nothing,
            "ci-autoscaler --help": process_ms("-m", "autoscaler", "--help"),
            "check-config example": process_ms(
                "-m", "autoscaler", "check-config", str(files["config.example.yaml"])
            ),
            "check-config 50 types": process_ms("-m", "autoscaler", "check-config", str(big)),
        }
    for name, ms in rows.items():
        print(f"  {name:22} {ms:8.0f} {ms / nothing:6.1f}x python")
    print(f"  load average {os.getloadavg()[0]:.1f}")
    return True


if __name__ == "__main__":
    sys.exit(0 if run() else 1)
