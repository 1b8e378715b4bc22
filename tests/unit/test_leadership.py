"""Who acts: the ``state`` section, the controller's gate (a follower's tick is a
dry run), and the fence every leader-only action passes right before it happens."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from autoscaler.alerting.delivery import Deliverer
from autoscaler.config import (
    DYNAMODB,
    SQLITE,
    AlertRuleConfig,
    AlertsConfig,
    AwsConfig,
    ReceiverConfig,
    RetryConfig,
    StateConfig,
    parse_config,
)
from autoscaler.controller import Controller
from autoscaler.errors import ConfigError, NotLeaderError
from autoscaler.scale.scaler import Scaler
from autoscaler.secrets import SecretUrl
from autoscaler.state.fence import Fence, FencedPool, FencedSource
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics
from tests.factories import alert_engine, config_doc
from tests.unit.handover_fakes import handover_ports
from tests.unit.scaling_fakes import (
    GPU,
    T0,
    FakePool,
    FakeSource,
    config,
    inst,
    observation,
    pool,
    rtype,
    runner,
    snapshot,
)
from tests.unit.test_controller import FakeSource as ScriptedSource
from tests.unit.test_controller import RecordingScaler
from tests.unit.test_controller import config as controller_config
from tests.unit.test_controller import observation as controller_observation

# --- the state section ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        pytest.param(None, StateConfig(), id="default-sqlite"),
        pytest.param(
            {"path": "/var/lib/x.db"},
            StateConfig(backend=SQLITE, path="/var/lib/x.db"),
            id="sqlite-path",
        ),
        pytest.param(
            {"backend": "dynamodb", "table": "ci-autoscaler"},
            StateConfig(backend=DYNAMODB, table="ci-autoscaler", lease_duration=30.0),
            id="dynamodb",
        ),
        pytest.param(
            {"backend": "dynamodb", "table": "ci.autoscaler_1", "lease_duration": "10s"},
            StateConfig(backend=DYNAMODB, table="ci.autoscaler_1", lease_duration=10.0),
            id="dynamodb-lease",
        ),
    ],
)
def test_state_section_accepted(state: Any, expected: StateConfig) -> None:
    assert parse_config(config_doc(state=state), env={}).state == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        pytest.param(
            {"backend": "postgres"},
            ["state.backend: must be one of sqlite, dynamodb, got 'postgres'"],
            id="unknown-backend",
        ),
        pytest.param(
            {"backend": "dynamodb"},
            ["state.table: is required with backend dynamodb (the table's name)"],
            id="no-table",
        ),
        pytest.param(
            {"backend": "dynamodb", "table": "a b"},
            [
                "state.table: must be 3-255 characters of letters, digits, '_', '-' or '.' "
                "(a DynamoDB table name), got 'a b'"
            ],
            id="bad-table-name",
        ),
        pytest.param(
            {"backend": "dynamodb", "table": "t12", "lease_duration": "500ms"},
            ["state.lease_duration: must be at least 1s (renewed every third of it)"],
            id="lease-too-short",
        ),
        pytest.param(
            {"backend": "dynamodb", "table": "t12", "path": "x.db"},
            ["state.path: is the SQLite file; backend dynamodb keeps state in a table"],
            id="path-with-dynamodb",
        ),
        pytest.param(
            {"table": "t12", "lease_duration": "30s"},
            [
                "state.table: applies to backend dynamodb only (set state.backend)",
                "state.lease_duration: applies to backend dynamodb only (set state.backend)",
            ],
            id="dynamodb-keys-with-sqlite",
        ),
    ],
)
def test_state_section_refused(state: Any, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config_doc(state=state), env={})
    assert info.value.problems == expected


# --- the controller's gate -----------------------------------------------------------


@dataclass
class Leadership:
    leading: bool = True
    epoch: int = 4

    def acting(self) -> bool:
        return self.leading

    def token(self) -> tuple[str, int] | None:
        return ("me", self.epoch) if self.leading else None


@dataclass
class DryRunScaler(RecordingScaler):
    dry: list[bool] = field(default_factory=list)

    def step(self, snapshot: Any, observation: Any, now: Any, **kw: Any) -> Any:
        self.dry.append(kw["dry_run"])
        return super().step(snapshot, observation, now, observation_fresh=kw["observation_fresh"])


@dataclass
class DryRunAlerts:
    dry: list[bool] = field(default_factory=list)

    def step(self, *args: Any, dry_run: bool = False, **kw: Any) -> list[Any]:
        self.dry.append(dry_run)
        return []


def test_a_followers_ticks_are_dry_runs_and_the_leaders_are_not() -> None:
    """A follower polls and decides like the leader (its picture is warm when it takes
    over) but its stages run as dry runs: nothing scaled, saved or sent."""
    lead = Leadership(leading=False)
    scaler, alerts = DryRunScaler(calls=[]), DryRunAlerts()
    source = ScriptedSource([controller_observation(2, T0)])
    controller = Controller(
        controller_config(), source, Metrics(), scaler=scaler, alerts=alerts, leadership=lead
    )
    first = controller.tick(T0)
    lead.leading = True
    controller.tick(T0 + timedelta(seconds=30))
    assert scaler.dry == [True, False] and alerts.dry == [True, False]
    assert first.snapshot is not None and first.snapshot.per_type["cpu"].queue_size == 2
    assert source.calls == 2, "the follower polls too"
    assert controller.ready(T0 + timedelta(seconds=30)), "a follower is ready"


def test_once_dry_run_stays_a_dry_run_for_the_leader() -> None:
    scaler = DryRunScaler(calls=[])
    source = ScriptedSource([controller_observation(1, T0)])
    controller = Controller(
        controller_config(), source, Metrics(), scaler=scaler, leadership=Leadership()
    )
    controller.tick(T0, dry_run=True)
    assert scaler.dry == [True]


# --- the fence ---------------------------------------------------------------------


def fenced(lead: Leadership) -> tuple[Fence, list[str]]:
    refused: list[str] = []
    return Fence(lead, on_refused=refused.append, name="dynamodb table t"), refused


@pytest.mark.parametrize(
    ("action", "call"),
    [
        pytest.param(
            "set_desired_capacity",
            lambda p, s: p.set_desired_capacity("gpu-spot", 1),
            id="set_desired_capacity",
        ),
        pytest.param(
            "protect", lambda p, s: p.protect_instances("gpu-spot", ["i-1"]), id="protect"
        ),
        pytest.param(
            "terminate",
            lambda p, s: p.terminate_instance("gpu-spot", inst(1, "gpu-spot").id),
            id="terminate",
        ),
        pytest.param("remove_runner", lambda p, s: s.remove_runner(1), id="remove_runner"),
    ],
)
def test_a_follower_never_reaches_the_cloud_or_github(action: str, call: Any) -> None:
    lead = Leadership(leading=False)
    fence, refused = fenced(lead)
    fake = FakePool({"gpu-spot": pool("gpu-spot", [inst(1, "gpu-spot")])})
    source = FakeSource({1: runner(1, "gpu-spot")})
    with pytest.raises(NotLeaderError) as info:
        call(FencedPool(fake, fence), FencedSource(source, fence))
    assert info.value.code == "not_leader" and "dynamodb table t" in str(info.value)
    assert refused == [action]
    assert [c for c in fake.calls if c[0] != "describe"] == [] and source.removed == []


def test_reads_pass_and_the_leaders_actions_are_logged_with_the_epoch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="autoscaler.state.fence")
    lead = Leadership(leading=True, epoch=7)
    fence, refused = fenced(lead)
    fake = FakePool({"gpu-spot": pool("gpu-spot", max_size=3)})
    pool_ = FencedPool(fake, fence)
    assert set(pool_.describe(["gpu-spot"])) == {"gpu-spot"}
    pool_.set_desired_capacity("gpu-spot", 2)
    assert fake.pools["gpu-spot"].desired_capacity == 2 and refused == []
    assert "epoch 7: set_desired_capacity gpu-spot 2" in caplog.text
    lead.leading = False
    assert FencedSource(FakeSource(), fence).find_runner("x") is None  # a read: allowed


def test_a_lease_lost_mid_tick_stops_the_rest_of_the_ticks_actions() -> None:
    """The tick started as the leader; the lease ended after the first scale-up. The
    second pool's scale-up and every scale-in are skipped (and counted), not attempted."""
    lead = Leadership(leading=True)
    fence, refused = fenced(lead)
    fake = FakePool({"gpu-spot": pool("gpu-spot", max_size=1), "gpu-od": pool("gpu-od")})

    class Losing(FakePool):
        def set_desired_capacity(self, name: str, desired: int) -> None:
            fake.set_desired_capacity(name, desired)
            lead.leading = False

    losing = Losing(fake.pools)
    cfg = config(rtype(pools=("gpu-spot", "gpu-od"))).model_copy(
        update={"aws": AwsConfig(retry=RetryConfig(max_attempts=3))}
    )
    s = Scaler(
        FencedPool(losing, fence),
        FencedSource(FakeSource(), fence),
        cfg,
        Metrics(CollectorRegistry()),
        sleep=lambda _: None,
        rng=random.Random(0),
        **handover_ports(FakeSource()),
    )
    s.step(snapshot({GPU: 3}), observation(()), T0, observation_fresh=True)
    assert [c for c in fake.calls if c[0] == "set_desired_capacity"] == [
        ("set_desired_capacity", "gpu-spot", 1)
    ]
    assert refused == ["set_desired_capacity"], "gpu-od skipped, once (not retried)"


def test_the_deliverer_sends_nothing_without_the_lease(tmp_path: Any) -> None:
    """The alert stage saved a transition, then the lease ended before its round: the
    notification stays owed (the new leader sends it), nothing reaches the receiver."""
    sent: list[httpx.Request] = []
    lead = Leadership(leading=False)
    fence, refused = fenced(lead)
    alerts = AlertsConfig(
        rules=(
            AlertRuleConfig(
                name="q",
                team="t",
                priority="P2",
                description="d",
                receivers=("hook",),
                max_queue_size=0,
            ),
        ),
        receivers={
            "hook": ReceiverConfig(
                name="hook", type="webhook", url=SecretUrl("https://h.example/x")
            )
        },
    )
    metrics = Metrics(CollectorRegistry())

    def capture(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    deliverer = Deliverer(
        alerts.receivers,
        metrics,
        transport=httpx.MockTransport(capture),
        sleep=lambda _: None,
        gate=fence,
    )
    store = SqliteStore(None)
    engine = alert_engine(alerts, store=store, metrics=metrics, deliverer=deliverer)
    engine.step(snapshot({GPU: 3}), T0, T0)
    assert deliverer.flush(5.0)
    assert sent == [] and refused == ["notify"]
    assert [i.notification.status for i in store.pending()] == ["FIRING"]
    lead.leading = True
    engine.step(snapshot({GPU: 3}), T0, T0 + timedelta(seconds=30))
    assert deliverer.flush(5.0)
    assert len(sent) == 1 and store.pending() == []
