"""Config of alertmanager receivers: one URL or an HA cluster's, the resend interval."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.config import parse_config
from autoscaler.errors import ConfigError
from tests.factories import config_doc


def config(receiver: dict[str, Any], **alerts: Any) -> dict[str, Any]:
    return config_doc(alerts={"receivers": {"am": receiver}, **alerts})


@pytest.mark.parametrize(
    ("receiver", "urls"),
    [
        ({"url": "http://am:9093"}, ("http://am:9093",)),
        ({"url": ["http://a:9093", "http://b:9093"]}, ("http://a:9093", "http://b:9093")),
        ({"urls": ["http://a:9093", "http://b:9093"]}, ("http://a:9093", "http://b:9093")),
        (
            {"url": "http://a:9093", "urls": ["http://a:9093", "https://b/api/v2/alerts"]},
            ("http://a:9093", "https://b/api/v2/alerts"),
        ),
        ({"url": "${AM_URL}"}, ("http://am.internal:9093",)),
    ],
    ids=["one-url", "url-list", "urls", "url-and-urls-deduplicated", "from-env"],
)
def test_alertmanager_receiver_urls(receiver: dict[str, Any], urls: tuple[str, ...]) -> None:
    parsed = parse_config(
        config({"type": "alertmanager", **receiver}), env={"AM_URL": "http://am.internal:9093"}
    )
    rc = parsed.alerts.receivers["am"]
    assert tuple(u.reveal() for u in rc.urls) == urls
    assert rc.url is not None and rc.url.reveal() == urls[0]


def test_alertmanager_resend_defaults_to_prometheus_resend_delay() -> None:
    parsed = parse_config(config({"type": "alertmanager", "url": "http://am:9093"}), env={})
    assert parsed.alerts.alertmanager_resend == 60.0
    quick = config({"type": "alertmanager", "url": "http://am:9093"}, alertmanager_resend="15s")
    assert parse_config(quick, env={}).alerts.alertmanager_resend == 15.0


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            config({"type": "alertmanager"}),
            "alerts.receivers.am.url: is required (or urls) for an alertmanager receiver",
        ),
        (
            config({"type": "alertmanager", "urls": ["am:9093"]}),
            "alerts.receivers.am.urls[0]: must be an http(s) URL, got no http(s):// scheme "
            "(the URL is not shown)",
        ),
        (
            config({"type": "webhook", "url": "http://x", "urls": ["http://y"]}),
            "alerts.receivers.am.urls: is for alertmanager receivers only (use url)",
        ),
        (
            config({"type": "alertmanager_webhook"}),
            "alerts.receivers.am.url: is required for an alertmanager_webhook receiver",
        ),
        (
            config({"type": "alertmanager", "url": "http://am:9093"}, alertmanager_resend="x"),
            "alerts.alertmanager_resend: must be a duration like 30s, 5m or 4h, got 'x'",
        ),
    ],
    ids=["no-url", "not-a-url", "urls-elsewhere", "webhook-needs-url", "bad-resend"],
)
def test_problems(doc: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env={})
    assert expected in info.value.problems


def test_a_bad_url_is_not_echoed() -> None:
    """A URL may carry credentials (user:password@); the problem names its place only."""
    doc = config({"type": "alertmanager", "urls": ["ops:hunter2@am:9093"]})
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env={})
    assert not any("hunter2" in p for p in info.value.problems)
