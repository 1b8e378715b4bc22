"""``alerts test`` against an Alertmanager: wait out the route's ``group_wait``, then read
the alert back from ``GET /api/v2/alerts``.

A POST that Alertmanager accepts proves the URL, not that a route would notify. Posting
FIRING and RESOLVED back to back resolves the alert before the route's ``group_wait``
ends, so nothing is ever notified. So the test waits the longest ``group_wait`` of the
running configuration (``GET /api/v2/status``, ``config.original``; Alertmanager's
default 30s where none is set), then asks Alertmanager which receivers the alert routes
to, and only then posts RESOLVED.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
import yaml

from autoscaler.alerting.alertmanager import API_PATH
from autoscaler.alerting.alertmanager_sync import host
from autoscaler.config.durations import parse_duration

#: Alertmanager's own default ``group_wait``.
DEFAULT_GROUP_WAIT = 30.0


@dataclass(frozen=True)
class Received:
    """What one Alertmanager says of the test alert."""

    url: str
    group_wait: float
    state: str
    """``active``, ``suppressed`` (silenced or inhibited), or ``missing``."""
    receivers: tuple[str, ...]

    def line(self) -> str:
        if self.state == "missing":
            return f"{host(self.url)}: not received (GET {API_PATH} does not list it)"
        routes = ", ".join(self.receivers) or "no receiver"
        return (
            f"{host(self.url)}: received after group_wait {self.group_wait:g}s, "
            f"{self.state}, routed to {routes}"
        )


def base_url(url: str) -> str:
    """The Alertmanager's base URL, from a receiver URL (base or full API path)."""
    text = url.rstrip("/")
    return text.removesuffix(API_PATH)


def group_waits(route: Any) -> Iterable[float]:
    """Every ``group_wait`` of a route tree (the root's default where it sets none)."""
    if not isinstance(route, dict):
        return
    wait = route.get("group_wait")
    yield parse_duration(wait) if isinstance(wait, str) else DEFAULT_GROUP_WAIT
    for child in route.get("routes") or ():
        yield from group_waits(child)


def longest_group_wait(client: httpx.Client, url: str) -> float:
    """The longest ``group_wait`` of the running configuration; the default if unreadable."""
    try:
        answer = client.get(f"{base_url(url)}/api/v2/status")
        original = answer.json()["config"]["original"]
        route = yaml.safe_load(original).get("route")
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError):
        return DEFAULT_GROUP_WAIT
    return max(group_waits(route), default=DEFAULT_GROUP_WAIT)


def read_back(client: httpx.Client, url: str, alertname: str, fingerprint: str) -> Received:
    """The test alert as Alertmanager lists it (by ``alertname``, then its fingerprint)."""
    answer = client.get(
        f"{base_url(url)}{API_PATH}",
        params={
            "filter": f'alertname="{alertname}"',
            "active": "true",
            "silenced": "true",
            "inhibited": "true",
        },
    )
    answer.raise_for_status()
    for alert in answer.json():
        if alert.get("annotations", {}).get("fingerprint") == fingerprint:
            state = str(alert.get("status", {}).get("state", "active"))
            names = tuple(str(r.get("name")) for r in alert.get("receivers", ()))
            return Received(url, 0.0, state, names)
    return Received(url, 0.0, "missing", ())


def confirm(
    urls: Iterable[str],
    alertname: str,
    fingerprint: str,
    *,
    sleep: Callable[[float], None],
    timeout: float = 5.0,
    transport: httpx.BaseTransport | None = None,
) -> list[Received]:
    """Wait the longest ``group_wait`` of these Alertmanagers, then read the alert back
    from each."""
    with httpx.Client(timeout=timeout, transport=transport) as client:
        urls = list(urls)
        wait = max((longest_group_wait(client, u) for u in urls), default=DEFAULT_GROUP_WAIT)
        sleep(wait + 1.0)
        out = []
        for url in urls:
            try:
                found = read_back(client, url, alertname, fingerprint)
            except httpx.HTTPError:
                found = Received(url, wait, "missing", ())
            out.append(Received(found.url, wait, found.state, found.receivers))
        return out
