"""Wiring of the handover: the scaler gets GitHub's runner registration (the source), the
parameter store and the state store's ledger, in every mode."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.app.wiring import build_runtime
from autoscaler.config import Config, StateConfig, WebhookConfig
from autoscaler.scale.scaler import Scaler
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import FakeParameters, RegisteringSource
from tests.unit.scaling_fakes import FakePool, FakeSource, config, pool, rtype

POOL = "gpu-spot"


def cfg(mode: str) -> Config:
    c = config(rtype(pools=(POOL,)).model_copy(update={"mode": mode}))
    return c.model_copy(update={"state": StateConfig(path=":memory:")})


def scaler_of(mode: str, source: FakeSource) -> Scaler | None:
    runtime = build_runtime(
        cfg(mode),
        Metrics(CollectorRegistry()),
        source=source,
        pool=FakePool({POOL: pool(POOL)}),
        parameters=FakeParameters(),
    )
    try:
        scaler = runtime.controller.scaler
        assert scaler is None or isinstance(scaler, Scaler)
        return scaler
    finally:
        runtime.close()


@pytest.mark.parametrize("mode", ["ephemeral", "persistent"])
def test_every_mode_gets_the_handover_over_the_state_store(mode: str) -> None:
    source = RegisteringSource()
    scaler = scaler_of(mode, source)
    assert scaler is not None
    assert scaler.handover.ledger.store is not None  # the ledger lives in the state store
    assert scaler.handover.calls.registrar is source


@pytest.mark.parametrize("mode", ["ephemeral", "persistent"])
def test_a_source_that_cannot_register_runners_is_refused_at_start(mode: str) -> None:
    with pytest.raises(ValueError, match="register runners"):
        scaler_of(mode, FakeSource())


def test_with_webhooks_an_ephemeral_type_still_registers_through_the_poll() -> None:
    """Regression (webhooks merged with ephemeral runners): with a webhook section the source is the
    webhook wrapper, which only observes; the wiring asked it for generate-jitconfig and
    refused to start ("needs a source that can register runners"), so `make demo`
    crashed. Registration goes through the poll's source, as job retry does."""
    source = RegisteringSource()
    c = cfg("ephemeral").model_copy(update={"webhook": WebhookConfig(secret=Secret("s3cret"))})
    runtime = build_runtime(
        c,
        Metrics(CollectorRegistry()),
        source=source,
        pool=FakePool({POOL: pool(POOL)}),
        parameters=FakeParameters(),
        webhooks=True,
    )
    try:
        assert runtime.webhooks is not None
        scaler = runtime.controller.scaler
        assert isinstance(scaler, Scaler)
        assert scaler.handover.calls.registrar is source
    finally:
        runtime.close()
