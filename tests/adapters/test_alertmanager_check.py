"""``alerts test``'s read-back from Alertmanager, against ``httpx.MockTransport``: the
group_wait it waits, and what it finds in ``GET /api/v2/alerts``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from autoscaler.alerting.alertmanager_check import Received, confirm

URL = "http://am:9093"


def transport(status: Any, alerts: list[dict[str, Any]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v2/status":
            return httpx.Response(200, json=status) if status is not None else httpx.Response(503)
        assert request.url.params["filter"] == 'alertname="CiAutoscalerTestAlert"'
        return httpx.Response(200, json=alerts)

    return httpx.MockTransport(handle)


def status(route: dict[str, Any]) -> dict[str, Any]:
    return {"config": {"original": json.dumps({"route": route})}}


ALERT = {
    "annotations": {"fingerprint": "f1"},
    "status": {"state": "active"},
    "receivers": [{"name": "pager"}],
}


@pytest.mark.parametrize(
    ("answer", "alerts", "slept", "found"),
    [
        pytest.param(
            status({"receiver": "x"}),
            [ALERT],
            31.0,
            ("active", ("pager",)),
            id="default-group-wait",
        ),
        pytest.param(
            status({"group_wait": "10s", "routes": [{"group_wait": "1m"}, {}]}),
            [ALERT],
            61.0,
            ("active", ("pager",)),
            id="longest-of-the-tree",
        ),
        pytest.param(None, [ALERT], 31.0, ("active", ("pager",)), id="status-unreadable"),
        pytest.param(
            status({"group_wait": "0s"}),
            [{**ALERT, "annotations": {"fingerprint": "other"}}],
            1.0,
            ("missing", ()),
            id="not-listed",
        ),
        pytest.param(
            status({"group_wait": "0s"}),
            [{**ALERT, "status": {"state": "suppressed"}}],
            1.0,
            ("suppressed", ("pager",)),
            id="silenced",
        ),
    ],
)
def test_confirm_waits_group_wait_and_reads_the_alert_back(
    answer: Any, alerts: list[dict[str, Any]], slept: float, found: tuple[str, tuple[str, ...]]
) -> None:
    sleeps: list[float] = []
    (got,) = confirm(
        [f"{URL}/api/v2/alerts"],
        "CiAutoscalerTestAlert",
        "f1",
        sleep=sleeps.append,
        transport=transport(answer, alerts),
    )
    assert sleeps == [slept]
    assert (got.state, got.receivers) == found
    assert isinstance(got, Received) and got.url.startswith(URL)
