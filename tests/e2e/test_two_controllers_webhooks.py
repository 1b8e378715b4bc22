"""Two real controllers with webhooks on one DynamoDB table.

Before this the webhook job index lived in the memory of the controller that received the
delivery: the follower's listener answered the load balancer's health check 503 so that
deliveries went to the leader only, and a follower that took over started with an empty
index until its next reconcile (``reconcile_interval``, 5 minutes by default).

Now both listeners serve (405 on a GET, as the ALB's health check expects), whichever
controller receives a delivery writes it to the state table, and the leader reads it from
there. ``poll_interval: 60s`` and ``reconcile_interval: 5m``: a scale-up within seconds
can only come from a webhook, and one the follower received can only reach the leader
through the table. moto's server runs in a process of its own, one request at a time (see
tests/e2e/test_two_controllers.py); no fleet emulator, so queued jobs stay queued and the
desired capacity is the number of jobs the leader knows of.
"""

from __future__ import annotations

import signal
import time
from functools import partial
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.sim.fleet import aws_clients
from tests.e2e.pair import CPU, Controller, Pair, pair, wait_until

pytestmark = pytest.mark.e2e

SECRET = "pair-webhook-secret-value"


def metric(c: Controller, name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples matching ``labels`` (None: the controller is down)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{c.port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def desired(p: Pair) -> int:
    autoscaling, _ = aws_clients(p.moto)
    (group,) = autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
    return int(group["DesiredCapacity"])


def reconciled(c: Controller) -> float:
    return metric(c, "ci_autoscaler_webhook_reconciles_total") or 0.0


def queue(p: Pair, count: int) -> None:
    for _ in range(count):
        p.github.queue_job("app", CPU)


def test_deliveries_to_the_follower_scale_and_a_new_leader_has_the_index(
    tmp_path: Path, moto: str
) -> None:
    with pair(tmp_path, moto, poll_interval=60.0, webhook_secret=SECRET, boot_timeout="10m") as p:
        a = p.start("a")
        wait_until(lambda: p.leader() is a, 20, "a to lead")
        epoch = int(p.lease()["epoch"])  # type: ignore[index]
        b = p.start("b")
        wait_until(lambda: p.following(b, epoch), 20, "b to follow")
        for c in (a, b):
            wait_until(partial(reconciled, c), 20, f"{c.name}'s first poll")
            # both listeners serve: the ALB's health check passes on both
            assert httpx.get(c.hook_url, timeout=5).status_code == 405

        polls = {c.name: reconciled(c) for c in (a, b)}  # until events flow: every tick

        # 1. Deliveries to the follower only: the leader scales for them within seconds.
        sender = p.github.send_webhooks(b.hook_url, SECRET.encode())
        started = time.monotonic()
        queue(p, 3)
        wait_until(lambda: desired(p) == 3, 20, "desired 3 from the follower's deliveries")
        reacted = time.monotonic() - started
        assert sender.wait_idle()
        assert [s.status for s in sender.sent] == [202, 202, 202]
        assert metric(b, "ci_autoscaler_webhook_events_total", result="accepted") == 3
        assert metric(a, "ci_autoscaler_webhook_events_total", result="accepted") == 0
        assert reconciled(a) == polls["a"], "no reconcile explains it: the poll is 60 s away"
        assert any("epoch" in line and "set_desired_capacity" in line for line in a.lines())

        # 2. Deliveries to the leader only, then it dies: the new leader has them all
        # at its first tick, without a reconcile.
        sender.url = a.hook_url
        queue(p, 2)
        wait_until(lambda: desired(p) == 5, 20, "desired 5 from the leader's deliveries")
        assert sender.wait_idle()
        p.kill("a", signal.SIGKILL)
        wait_until(lambda: p.leader() is b, 20, "b to take over")
        wait_until(lambda: metric(b, "ci_autoscaler_leader") == 1, 20, "b acting")
        wait_until(
            lambda: metric(b, "ci_autoscaler_queue_size", runner_type="linux.4xlarge") == 5,
            20,
            "the new leader's queue to hold the old leader's jobs",
        )
        assert reconciled(b) == polls["b"], "read from the table, not from a reconcile"

        # 3. The new leader acts on the whole index: one more job is the sixth instance.
        sender.url = b.hook_url
        queue(p, 1)
        wait_until(lambda: desired(p) == 6, 20, "desired 6: five known plus one")
        assert reconciled(b) == polls["b"]
        print(f"follower's delivery -> leader's SetDesiredCapacity after {reacted:.2f}s")
