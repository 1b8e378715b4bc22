"""No ordering of GitHub's events kills a busy runner on the orphan path, in either mode.

One instance is past ``boot_timeout`` with no runner in the poll: an orphan candidate. Its
machine, meanwhile, boots the way the runner-pool module's boot script does, in steps:

- persistent: claim the registration token (read the parameter, delete it), register
  with it (``config.sh``), take a job;
- ephemeral: connect with the JIT config (``run.sh --jitconfig``), take a job.

Each step happens at one *point* of the controller's tick: before the poll reads the
runner list (the lookup), then right after any GitHub call took effect (the fake GitHub's
``before_reply``: the controller has not heard back yet), before any call to the pool or
the parameter store, or after the tick.
The table plays every placement of the steps over the points (in order; a step GitHub or
SSM refuses ends the machine's boot) against the real GitHub adapter and the project's
fake GitHub over HTTP, and checks the one thing that must hold: a machine whose runner
took a job ends with its instance running. A machine that never boots is still cleaned
up, and named placements show the race being met and the busy runner kept.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.config import Config, parse_config
from autoscaler.controller import Controller
from autoscaler.fakes.github import FakeGitHub
from autoscaler.observe.github.source import GitHubSource
from autoscaler.scale.scaler import Scaler
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import FakeLedgerStore, FakeParameters
from tests.unit.scaling_fakes import FakePool, iid, inst, pool

LABELS = ["self-hosted", "linux.4xlarge"]
POOL = "ci-cpu"
PATH = "/ci-autoscaler/jit"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
FIRST = NOW - timedelta(seconds=1000)  # the tick that handed the instance its credential
INSTANCE = iid(1)
NAME = f"{POOL}-{INSTANCE}"


class Points:
    """Runs the machine's steps placed at each point as the tick reaches it."""

    def __init__(self, placement: Sequence[int], steps: Sequence[Callable[[], bool]]) -> None:
        self.at: dict[int, list[Callable[[], bool]]] = {}
        for point, step in zip(placement, steps, strict=True):
            self.at.setdefault(point, []).append(step)
        self.reached = 0
        self.stopped = False

    def point(self) -> None:
        for step in self.at.pop(self.reached, []):
            if not self.stopped and not step():
                self.stopped = True  # the boot script gives up at a refused step
        self.reached += 1

    def finish(self) -> None:
        """After the tick: every step not yet played, in order."""
        for key in sorted(self.at):
            for step in self.at[key]:
                if not self.stopped and not step():
                    self.stopped = True
        self.at.clear()


@dataclass
class HookedPool(FakePool):
    hook: Callable[[], None] = lambda: None

    def describe(self, names: Sequence[str]) -> Any:
        self.hook()
        return super().describe(names)

    def set_desired_capacity(self, pool: str, desired: int) -> None:
        self.hook()
        super().set_desired_capacity(pool, desired)

    def protect_instances(self, pool: str, instance_ids: Sequence[str]) -> None:
        self.hook()
        super().protect_instances(pool, instance_ids)

    def terminate_instance(self, pool: str, instance_id: str) -> None:
        self.hook()
        super().terminate_instance(pool, instance_id)


@dataclass
class HookedParameters(FakeParameters):
    hook: Callable[[], None] = lambda: None
    machine: set[str] = field(default_factory=set)

    def put_secret(self, name: str, value: Any, *, instance_id: str) -> None:
        self.hook()
        super().put_secret(name, value, instance_id=instance_id)

    def delete(self, name: str) -> bool:
        self.hook()
        return super().delete(name)

    def list_names(self, path: str) -> list[str]:
        self.hook()
        return super().list_names(path)


@dataclass
class Machine:
    """The instance's boot script, step by step (each returns False when refused)."""

    fake: FakeGitHub
    params: FakeParameters
    job_id: int
    credential: str | None = None
    runner_id: int | None = None
    busy: bool = False

    def claim(self) -> bool:
        name = f"{PATH}/{POOL}/{INSTANCE}"
        found = self.params.values.get(name)
        if found is None:
            return False
        del self.params.values[name]  # the delete that succeeds claims it
        self.credential = found[0]
        return True

    def register(self) -> bool:
        assert self.credential is not None
        try:
            self.runner_id = self.fake.register_with_token(self.credential, NAME, LABELS)
        except ValueError:
            return False
        return True

    def connect(self) -> bool:
        found = self.params.values.get(f"{PATH}/{POOL}/{INSTANCE}")
        if found is None:
            return False
        try:
            self.runner_id = self.fake.connect_jit(found[0])
        except ValueError:
            return False
        return True

    def take_job(self) -> bool:
        assert self.runner_id is not None
        if self.runner_id not in {r.id for r in self.fake.runners()}:
            return False  # deleted meanwhile: a deleted runner gets no job
        self.fake.assign_job(self.job_id, self.runner_id)
        self.busy = True
        return True


def _config(url: str, mode: str) -> Config:
    return parse_config(
        {
            "poll_interval": "30s",
            "github": {"owner": "o", "api_url": url, "token": "t", "repos": ["app"]},
            "runner_types": {
                "cpu": {
                    "labels": LABELS,
                    "pools": [POOL],
                    "mode": mode,
                    "boot_timeout": "15m",
                    "max": 1,
                }
            },
            "aws": {"retry": {"max_attempts": 1}},
            "jit": {"parameter_path": PATH},
        },
        env={},
    )


@dataclass
class World:
    fake: FakeGitHub
    pool: HookedPool
    params: HookedParameters
    controller: Controller
    machine: Machine
    clock: dict[str, datetime]


@contextmanager
def world(mode: str) -> Iterator[World]:
    """The instance launched at FIRST and was handed its credential in a tick then; the
    tick under test is ``boot_timeout`` and more later (``NOW``)."""
    clock = {"now": FIRST}
    with FakeGitHub("o", "t", clock=lambda: clock["now"]) as fake:
        fake.add_repo("app")
        job = fake.queue_job("app", LABELS, created_at=FIRST)
        config = _config(fake.url, mode)
        metrics = Metrics(CollectorRegistry())
        source = GitHubSource(
            config.github,
            metrics,
            wall_clock=lambda: clock["now"].timestamp(),  # noqa: PLW0108 (read at each call)
            transport=httpx.HTTPTransport(verify=False),  # loopback http: no CA bundle to load
        )
        hooked = HookedPool({POOL: pool(POOL, [inst(1, POOL, age=5, now=FIRST)], max_size=1)})
        hooked.now = FIRST
        params = HookedParameters()
        scaler = Scaler(
            hooked,
            source,
            config,
            metrics,
            sleep=lambda _: None,
            rng=random.Random(0),
            registrar=source,
            parameters=params,
            handover_store=FakeLedgerStore(),
        )
        controller = Controller(config, source, metrics, scaler=scaler)
        try:
            controller.tick(FIRST)
            assert f"{PATH}/{POOL}/{INSTANCE}" in params.values, "the credential is handed over"
            clock["now"] = hooked.now = NOW
            yield World(fake, hooked, params, controller, Machine(fake, params, job), clock)
        finally:
            source.close()


def play(mode: str, placement: Sequence[int]) -> tuple[bool, bool, int]:
    """One placement: (machine busy, instance still running, points the tick reached)."""
    with world(mode) as w:
        m = w.machine
        steps = (
            [m.claim, m.register, m.take_job] if mode == "persistent" else [m.connect, m.take_job]
        )
        points = Points(placement, steps)
        points.point()  # point 0: before the poll reads the runner list
        armed: list[bool] = []

        def after_github(method: str, path: str, status: int) -> None:
            if armed:
                points.point()
            elif method == "GET" and path.split("?", maxsplit=1)[0] == "/orgs/o/actions/runners":
                points.point()  # point 1: the poll has its runner list (the lookup)

        def before_call() -> None:
            # From the scaler's first call on, every call is a point. (The rest of the poll
            # reads jobs: an event during it is the same to the runner list as one before
            # the scaler's first call.)
            armed.append(True)
            points.point()

        w.fake.before_reply = after_github
        w.pool.hook = w.params.hook = before_call
        w.controller.tick(NOW)
        w.fake.before_reply = None
        w.pool.hook = w.params.hook = lambda: None
        reached = points.reached
        points.finish()
        running = INSTANCE in {i.id for i in w.pool.pools[POOL].instances}
        return m.busy, running, reached


#: The points the tick under test reaches (0: before the poll's runner list; 1: right
#: after it; then each call of the scaler). Persistent: describe, withdraw the token, find
#: the runner, terminate. Ephemeral: describe, delete the JIT runner, its parameter,
#: terminate, and the scale-up that replaces the instance.
POINTS = {"persistent": 6, "ephemeral": 7}
STEPS = {"persistent": 3, "ephemeral": 2}
CASES = [
    pytest.param(mode, placement, id=f"{mode}-" + "-".join(map(str, placement)))
    for mode in ("persistent", "ephemeral")
    # every placement of the ordered steps over the points, and after the tick
    for placement in itertools.combinations_with_replacement(range(POINTS[mode] + 1), STEPS[mode])
]


@pytest.mark.parametrize("mode", ["persistent", "ephemeral"])
def test_the_table_covers_every_point_of_the_tick(mode: str) -> None:
    busy, running, reached = play(mode, (POINTS[mode] + 1,) * STEPS[mode])
    assert reached == POINTS[mode], "the tick's calls changed: update POINTS"
    assert (busy, running) == (False, False), "an orphan whose machine never booted goes"


@pytest.mark.parametrize(("mode", "placement"), CASES)
def test_a_runner_that_took_a_job_keeps_its_instance(mode: str, placement: tuple[int, ...]) -> None:
    busy, running, _ = play(mode, placement)
    assert running or not busy, "the instance of a busy runner was terminated"


@pytest.mark.parametrize(
    ("mode", "placement"),
    [
        # claimed before the poll, registered and busy between the withdrawal and the
        # lookup: the lookup finds it
        pytest.param("persistent", (0, 3, 3), id="persistent-registers-after-withdrawal"),
        # claimed before the poll, registered and busy after the lookup: kept because the
        # token it claimed was still live
        pytest.param("persistent", (0, 4, 4), id="persistent-registers-after-lookup"),
        # connected and busy after the poll, before the delete: GitHub refuses it (422)
        pytest.param("ephemeral", (2, 2), id="ephemeral-busy-before-delete"),
    ],
)
def test_the_race_is_met_and_the_busy_runner_kept(mode: str, placement: tuple[int, ...]) -> None:
    assert play(mode, placement)[:2] == (True, True)
