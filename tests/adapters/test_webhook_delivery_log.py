"""The webhook's delivery log against the real fake GitHub and the real listener.

The fake delivers its ``workflow_job`` events over HTTP to the listener, drops a seeded
share of them and logs every attempt, as GitHub does. The reconcile reads that log
(``webhook.hook_id``), redelivers what failed and, when nothing was lost since the last
read, lists the runners only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from autoscaler.app.served import WebhookServer
from autoscaler.app.wiring import build_runtime
from autoscaler.config import parse_config
from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_webhooks import HOOK_ID, Faults, WebhookSender
from autoscaler.observe.github.delivery_watch import DeliveryWatch
from autoscaler.observe.github.source import GitHubSource
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.telemetry import Metrics
from tests.adapters.webhook_support import corrections, fresh_metrics, github_poll, hook_config
from tests.unit.webhook_payloads import SECRET

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ("self-hosted", "linux.4xlarge")
INTERVAL = 300.0


@dataclass
class Org:
    fake: FakeGitHub
    metrics: Metrics = field(default_factory=fresh_metrics)
    now: datetime = T0
    source: WebhookSource | None = None
    sender: WebhookSender | None = None
    server: WebhookServer | None = None
    poll: GitHubSource | None = None

    def start(
        self, *, drop: float = 0.0, hook_id: int = HOOK_ID, acting: bool = True
    ) -> WebhookSource:
        fake = self.fake
        fake.add_repo("app")
        fake.register_runner("r-1", CPU)
        hook = hook_config(reconcile_interval=INTERVAL, hook_id=hook_id)
        receiver = WebhookReceiver(hook, self.metrics, clock=lambda: self.now)
        self.server = WebhookServer(receiver, self.metrics, "127.0.0.1", 0)
        self.server.start()
        url = f"http://127.0.0.1:{self.server.port}/github/webhook"
        self.sender = fake.send_webhooks(url, SECRET, faults=Faults(drop=drop, seed=3))
        self.poll = github_poll(fake, self.metrics, lambda: self.now)
        watch = DeliveryWatch(self.poll.delivery_log(hook_id), self.metrics, first_window=INTERVAL)
        self.source = WebhookSource(
            self.poll,
            receiver,
            hook,
            self.metrics,
            poll_interval=60.0,
            deliveries=watch,
            acting=lambda: acting,
        )
        self.source.observe(self.now)  # the first reconcile: the full poll, the first read
        return self.source

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
        if self.server is not None:
            self.server.stop()
        if self.poll is not None:
            self.poll.close()

    def queue(self, n: int) -> list[int]:
        jobs = [self.fake.queue_job("app", CPU, name=f"j{i}") for i in range(n)]
        assert self.sender is not None and self.sender.wait_idle(10)
        return jobs

    def reconcile(self) -> set[int]:
        """Five minutes on, a delivery between (webhooks flow): the reconcile's jobs."""
        assert self.source is not None
        self.now += timedelta(seconds=INTERVAL)
        return {j.id for j in self.source.observe(self.now).jobs}

    def paths(self, since: int) -> list[str]:
        with self.fake.lock:
            return [r.path.split("?")[0] for r in self.fake.requests[since:]]

    def mark(self) -> int:
        with self.fake.lock:
            return len(self.fake.requests)

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def org() -> Iterator[Org]:
    holder: list[Org] = []
    with FakeGitHub(clock=lambda: holder[0].now) as fake:
        holder.append(Org(fake))
        try:
            yield holder[0]
        finally:
            holder[0].close()


def test_dropped_deliveries_are_redelivered_and_the_index_ends_right(org: Org) -> None:
    """Half the deliveries dropped: the reconcile finds them failed in the log, asks GitHub
    to redeliver each (same guid), lists around them as before (counted ``missed``), and
    the redelivered events arrive through the listener, ``redelivery: true`` in the log."""
    org.start(drop=0.5)
    jobs = org.queue(12)
    sender = org.sender
    assert sender is not None
    dropped = {job_id for job_id, _ in sender.dropped}
    assert 0 < len(dropped) < len(jobs)
    sender.faults.drop = 0.0  # the redeliveries get through
    seen = org.reconcile()
    assert seen == set(jobs)  # the lean reconcile listed around the loss
    assert corrections(org.metrics, "missed") == len(dropped)
    redelivered = org.value("ci_autoscaler_webhook_redeliveries_total", result="requested")
    assert redelivered == len(dropped)
    assert org.value("ci_autoscaler_webhook_delivery_log_reads_total", result="lost") == 1
    assert sender.wait_idle(10)
    again = [e for e in sender.log if e.redelivery]
    failed = {e.guid for e in sender.log if e.status_code == 502}
    assert {e.guid for e in again} == failed and all(e.status == "OK" for e in again)
    assert all(e.status_code == 202 for e in again)  # the listener took each one
    assert org.source is not None
    org.source.observe(org.now)  # applies them: the listing got there first, nothing moves
    assert {j.id for j in org.source.index.jobs()} == set(jobs)
    # The next window is clean: the redeliveries went through and nothing else was lost.
    mark = org.mark()
    org.fake.queue_job("app", CPU, name="late")
    assert sender.wait_idle(10)
    org.reconcile()
    assert org.value("ci_autoscaler_webhook_delivery_log_reads_total", result="clean") == 1
    assert not any("/actions/runs" in p for p in org.paths(mark))


def test_a_clean_window_lists_the_runners_only_and_the_hour_sweeps(org: Org) -> None:
    """Every delivery made: the reconcile reads the log and the runner list, no runs or
    jobs listing; the jobs are the index's. An hour after the last listing, the lean
    reconcile runs again (the sweep for what webhooks never tell)."""
    org.start()
    jobs = org.queue(5)
    mark = org.mark()
    assert org.reconcile() == set(jobs)
    paths = org.paths(mark)
    assert "/orgs/demo-org/actions/runners" in paths
    assert "/orgs/demo-org/hooks/4242/deliveries" in paths
    assert not [p for p in paths if "/actions/runs" in p], paths
    assert org.value("ci_autoscaler_webhook_delivery_log_reads_total", result="clean") == 1
    assert org.value("ci_autoscaler_webhook_reconcile_corrections_total", kind="missed") == 0
    for _ in range(11):  # to the hour since the first (listing) reconcile
        org.fake.queue_job("app", CPU)
        assert org.sender is not None and org.sender.wait_idle(10)
        mark = org.mark()
        org.reconcile()
    assert any("/actions/runs" in p for p in org.paths(mark))
    assert org.value("ci_autoscaler_webhook_delivery_log_reads_total", result="clean") == 12


@pytest.mark.parametrize(
    ("status", "result", "says"),
    [
        pytest.param(403, "forbidden", "admin:org_hook", id="403-names-the-permission"),
        pytest.param(404, "not_found", "webhook.hook_id", id="404-names-the-hook-id"),
        pytest.param(500, "error", "500", id="5xx"),
    ],
)
def test_an_unreadable_log_falls_back_to_the_lean_reconcile(
    org: Org, caplog: pytest.LogCaptureFixture, status: int, result: str, says: str
) -> None:
    """The log cannot be read: the reconcile lists as without ``hook_id``, says so once
    in the log (a 403 naming the permission it needs) and counts every time."""
    org.start()
    org.queue(3)
    org.fake.inject_fault(r"/hooks/", status, times=10)
    mark = org.mark()
    with caplog.at_level(logging.WARNING, logger="autoscaler.observe.github.deliveries"):
        org.reconcile()
        org.fake.queue_job("app", CPU)
        assert org.sender is not None and org.sender.wait_idle(10)
        org.reconcile()
    assert any("/actions/runs" in p for p in org.paths(mark))
    assert org.value("ci_autoscaler_webhook_delivery_log_reads_total", result=result) == 2
    lines = [r.getMessage() for r in caplog.records if "delivery log unreadable" in r.getMessage()]
    assert len(lines) == 1 and says in lines[0]


def test_a_wrong_hook_id_is_a_404_and_the_fallback(org: Org) -> None:
    org.start(hook_id=999)
    org.queue(2)
    org.reconcile()
    assert org.value("ci_autoscaler_webhook_delivery_log_reads_total", result="not_found") == 2


def test_the_fakes_log_pages_newest_first_by_the_links_cursor(org: Org) -> None:
    """Five attempts at two a page: three pages through ``Link: rel="next"`` (a cursor),
    newest first, none twice; the last page has no ``next``."""
    org.start()
    org.queue(5)
    url: str | None = f"{org.fake.url}/orgs/demo-org/hooks/{HOOK_ID}/deliveries?per_page=2"
    ids: list[int] = []
    used: list[int] = []
    pages = 0
    with httpx.Client(headers={"Authorization": "Bearer fake-token"}) as client:
        while url is not None:
            answer = client.get(url)
            assert answer.status_code == 200
            used.append(int(answer.headers["x-ratelimit-used"]))
            ids += [item["id"] for item in answer.json()]
            url = answer.links.get("next", {}).get("url")
            pages += 1
    assert pages == 3
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 5
    assert used[1] - used[0] == used[2] - used[1] == 1  # each page counts, as on GitHub


def test_a_follower_reads_no_log_and_reconciles_as_without_it(org: Org) -> None:
    """Two controllers share one token's budget and one hook: only the acting one reads
    the log and redelivers (twice would redeliver twice); a follower lists as before."""
    org.start(drop=0.5, acting=False)
    org.queue(4)
    mark = org.mark()
    org.reconcile()
    paths = org.paths(mark)
    assert not [p for p in paths if "/hooks/" in p]
    assert any("/actions/runs" in p for p in paths)
    assert org.value("ci_autoscaler_webhook_redeliveries_total", result="requested") == 0


def test_the_runtime_reads_the_log_only_with_hook_id(org: Org) -> None:
    """``webhook.hook_id`` set: the webhook source has a delivery watch on the poll's
    source (its credentials and rate-limit gate); unset: none, the lean reconcile."""

    def watch_of(hook: dict[str, object]) -> DeliveryWatch | None:
        config = parse_config(
            {
                "github": {"api_url": org.fake.url, "owner": "demo-org", "token": "fake-token"},
                "runner_types": {"cpu": {"labels": list(CPU)}},
                "state": {"path": ":memory:"},
                "webhook": {"listen": "127.0.0.1:0", "secret": "s", **hook},
            },
            env={},
        )
        runtime = build_runtime(config, fresh_metrics(), webhooks=True)
        try:
            assert runtime.webhooks is not None
            return runtime.webhooks.source.deliveries
        finally:
            runtime.close()

    watch = watch_of({"hook_id": HOOK_ID})
    assert watch is not None and "/orgs/demo-org/hooks/4242/deliveries" in repr(watch)
    assert watch_of({}) is None
