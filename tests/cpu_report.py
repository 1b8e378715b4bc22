"""``pytest --cpu-report``: CPU seconds per test and per fixture setup, not wall time.

Wall time on a shared machine says how busy the machine was; CPU seconds say what a test
costs. A test's cost is measured around each of its phases (setup, call, teardown) as the
worker's own user and system time, plus that of its children it waited for, plus that of
its children still running (read from ``/proc``: the moto server of the worker, a
controller the test started). A fixture's setup is measured around its own function,
without the fixtures it requests.

The workers send their figures with their reports (pytest-xdist carries a report's
attributes), and the controller prints the top consumers, the share of each, and what the
workers spent outside any test (start-up, collection). ``--cpu-report-json PATH`` writes
every figure, to compare two runs.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_TICK = os.sysconf("SC_CLK_TCK")


def _live_descendants(pid: int) -> list[int]:
    """Every running descendant of ``pid`` (the kernel's per-thread children lists)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def _proc_seconds(pid: int) -> float:
    """A running process's own CPU time and that of the children it waited for."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime + cutime + cstime) / _TICK


def cpu_seconds() -> float:
    """This process's CPU time and every descendant's, running or waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = sum(_proc_seconds(p) for p in _live_descendants(os.getpid()))
    return own.ru_utime + own.ru_stime + done.ru_utime + done.ru_stime + live


class Recorder:
    """In each process that runs tests: measures the phases and fixture setups."""

    def __init__(self) -> None:
        self.fixtures: dict[str, float] = {}
        self.phase: dict[str, float] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, Any, Any]:
        before = cpu_seconds()
        try:
            return (yield)
        finally:
            key = f"{fixturedef.argname} ({fixturedef.scope})"
            self.fixtures[key] = self.fixtures.get(key, 0.0) + cpu_seconds() - before

    def _measure(self, when: str) -> Generator[None, Any, Any]:
        before = cpu_seconds()
        try:
            return (yield)
        finally:
            self.phase[when] = cpu_seconds() - before

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        self.fixtures = {}
        return (yield from self._measure("setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._measure("call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, Any]:
        return (yield from self._measure("teardown"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        report.cpu_seconds = self.phase.pop(call.when, 0.0)  # type: ignore[attr-defined]
        if call.when == "setup":
            report.cpu_fixtures = dict(self.fixtures)  # type: ignore[attr-defined]
        return report

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(session.config, "workeroutput", None)
        if output is not None:  # a pytest-xdist worker: its whole process, to the controller
            output["cpu_process_seconds"] = cpu_seconds()


class Report:
    """Where the reports arrive (the controller, or the only process): adds up, prints."""

    def __init__(self, top: int, json_path: str | None) -> None:
        self.top = top
        self.json_path = json_path
        self.tests: dict[str, float] = defaultdict(float)
        self.fixtures: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        self.workers: dict[str, float] = {}
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.tests[report.nodeid] += getattr(report, "cpu_seconds", 0.0)
        for name, seconds in getattr(report, "cpu_fixtures", {}).items():
            entry = self.fixtures[name]
            entry[0] += seconds
            entry[1] += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        if "cpu_process_seconds" in output:
            self.workers[output.get("workerid", str(len(self.workers)))] = output[
                "cpu_process_seconds"
            ]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        in_tests = sum(self.tests.values())
        if self.workers:  # the controller: its own time (its children are the workers)
            own = resource.getrusage(resource.RUSAGE_SELF)
            total = own.ru_utime + own.ru_stime + sum(self.workers.values())
        else:  # the only process: its own and its children's
            total = cpu_seconds()
        outside = total - in_tests
        wall = time.monotonic() - self.started
        tr.section("CPU seconds (--cpu-report)")
        tr.write_line(
            f"total {total:.1f} s CPU in {wall:.1f} s wall (load average now "
            f"{os.getloadavg()[0]:.1f}); in tests {in_tests:.1f} s; outside tests "
            f"(start-up, collection, workers' plumbing) {outside:.1f} s"
        )
        by_file: dict[str, float] = defaultdict(float)
        for nodeid, seconds in self.tests.items():
            by_file[nodeid.split("::")[0]] += seconds
        for title, rows in (
            ("tests", sorted(self.tests.items(), key=lambda kv: -kv[1])),
            ("files", sorted(by_file.items(), key=lambda kv: -kv[1])),
        ):
            tr.write_line(f"top {self.top} {title}:")
            cumulative = 0.0
            for name, seconds in rows[: self.top]:
                cumulative += seconds
                tr.write_line(
                    f"  {seconds:7.1f} s {100 * seconds / total:5.1f} % "
                    f"(cum {100 * cumulative / total:5.1f} %)  {name}"
                )
        tr.write_line(f"top {self.top} fixture setups (own function, summed over tests):")
        for name, (seconds, count) in sorted(self.fixtures.items(), key=lambda kv: -kv[1][0])[
            : self.top
        ]:
            tr.write_line(
                f"  {seconds:7.1f} s {100 * seconds / total:5.1f} %  {int(count):5d}x  {name}"
            )
        if self.json_path:
            Path(self.json_path).write_text(
                json.dumps(
                    {
                        "total": total,
                        "wall": wall,
                        "workers": self.workers,
                        "tests": self.tests,
                        "fixtures": {k: v[0] for k, v in self.fixtures.items()},
                    },
                    indent=1,
                    sort_keys=True,
                )
            )
            tr.write_line(f"written to {self.json_path}")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cpu-report", "CPU seconds per test and fixture")
    group.addoption(
        "--cpu-report",
        nargs="?",
        type=int,
        const=40,
        default=None,
        metavar="N",
        help="print the N (default 40) tests, files and fixture setups that use most CPU",
    )
    group.addoption(
        "--cpu-report-json", default=None, metavar="PATH", help="also write every figure here"
    )


def pytest_configure(config: pytest.Config) -> None:
    top = config.getoption("cpu_report")
    if top is None:
        return
    config.pluginmanager.register(Recorder(), "cpu-report-recorder")
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(
            Report(top, config.getoption("cpu_report_json")), "cpu-report"
        )
