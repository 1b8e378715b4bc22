"""Factories for what many tests build: a config and an alert engine. One place each.

- :func:`config_doc`: the smallest valid config document (the YAML, as a dict), with
  top-level sections replaced or added; :func:`load_config` loads one (no environment);
  :func:`config_problems` lists what the loader refuses in a document.
- :func:`oncall`: the alerts section most alerting tests use (one webhook receiver,
  ``oncall``, on a port nothing listens on) with the given built-ins and rules.
- :func:`alert_engine`: an :class:`AlertEngine` over an in-memory SQLite store, without
  delivery; :func:`paging`: one whose deliverer posts through ``httpx.MockTransport``
  (closed at the end of the ``with``).

Tests that check the config reader itself keep writing out the documents they read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from autoscaler.alerting.delivery import Deliverer
from autoscaler.alerting.engine import AlertEngine
from autoscaler.config import (
    AlertRuleConfig,
    AlertsConfig,
    BuiltinAlertsConfig,
    Config,
    ReceiverConfig,
    parse_config,
)
from autoscaler.errors import ConfigError
from autoscaler.secrets import SecretUrl
from autoscaler.state.sqlite import SqliteStore
from autoscaler.telemetry import Metrics

CPU_LABELS = ["self-hosted", "linux.4xlarge"]

#: A webhook receiver named ``oncall`` on a port nothing listens on (127.0.0.1:9, discard).
ONCALL = ReceiverConfig(name="oncall", type="webhook", url=SecretUrl("http://127.0.0.1:9"))


def config_doc(**sections: Any) -> dict[str, Any]:
    """``github`` (owner ``my-org``, a token) and one runner type ``cpu`` (labels
    ``self-hosted, linux.4xlarge``), with ``sections`` replacing or adding top-level keys."""
    doc: dict[str, Any] = {
        "github": {"owner": "my-org", "token": "t"},
        "runner_types": {"cpu": {"labels": list(CPU_LABELS)}},
    }
    doc.update(sections)
    return doc


def load_config(env: Mapping[str, str] | None = None, **sections: Any) -> Config:
    """:func:`config_doc` loaded as ``ci-autoscaler`` loads a file (``env``: none)."""
    return parse_config(config_doc(**sections), env=env or {})


def config_problems(doc: Any, env: Mapping[str, str] | None = None) -> list[str]:
    """The problems the loader reports for ``doc`` (it must refuse it)."""
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env=env or {})
    return info.value.problems


def oncall(
    builtin: BuiltinAlertsConfig | None = None, rules: tuple[AlertRuleConfig, ...] = ()
) -> AlertsConfig:
    """Alerts to :data:`ONCALL` only."""
    return AlertsConfig(
        rules=rules, receivers={"oncall": ONCALL}, builtin=builtin or BuiltinAlertsConfig()
    )


def alert_engine(
    alerts: AlertsConfig,
    *,
    store: SqliteStore | None = None,
    metrics: Metrics | None = None,
    deliverer: Deliverer | None = None,
    **engine: Any,
) -> AlertEngine:
    """An engine over ``store`` (default: SQLite in memory), with fresh metrics and no
    delivery unless given; ``engine``: AlertEngine's keyword arguments (``health``...)."""
    return AlertEngine(
        alerts,
        store if store is not None else SqliteStore(None),
        deliverer,
        metrics if metrics is not None else Metrics(),
        **engine,
    )


@contextmanager
def paging(
    alerts: AlertsConfig,
    receive: Callable[[httpx.Request], httpx.Response],
    *,
    store: SqliteStore | None = None,
    metrics: Metrics | None = None,
    deliverer: Mapping[str, Any] | None = None,
    **engine: Any,
) -> Iterator[tuple[AlertEngine, Deliverer]]:
    """(engine, its deliverer): every notification goes to ``receive`` (an
    ``httpx.MockTransport`` handler); ``deliverer``: Deliverer's keyword arguments. The
    deliverer is closed at the end."""
    m = metrics if metrics is not None else Metrics()
    d = Deliverer(alerts.receivers, m, transport=httpx.MockTransport(receive), **(deliverer or {}))
    try:
        yield alert_engine(alerts, store=store, metrics=m, deliverer=d, **engine), d
    finally:
        d.close()
