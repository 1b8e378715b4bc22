"""Wiring for job retry: its completed runs come from the poll's source alone, or, with
webhooks on, from the ``completed`` events first (a run that starts and fails between two
reconciles is never seen running by the poll); re-runs always go through the poll's
source (the webhook wrapper only observes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry

from autoscaler.app.wiring import Runtime, build_runtime
from autoscaler.config import Config, StateConfig, WebhookConfig
from autoscaler.config.job_retry import JobRetryConfig
from autoscaler.domain import CompletedRun, RunProgress
from autoscaler.job_retry.model import InstanceEnd
from autoscaler.job_retry.stage import RetryStage
from autoscaler.observe.github.webhook_completions import WebhookCompletedRuns
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics
from tests.unit.handover_fakes import FakeParameters, RegisteringSource
from tests.unit.scaling_fakes import FakePool, config, pool, rtype

POOL = "gpu-spot"


class RetryingSource(RegisteringSource):
    """A source that also finds completed runs and re-runs them, as GitHubSource does."""

    def completed_runs(self, now: datetime) -> Sequence[CompletedRun]:
        return []

    def read_run(self, repo: str, run_id: int) -> CompletedRun | RunProgress:
        raise AssertionError("not in these tests")

    def rerun_failed_jobs(self, repo: str, run_id: int) -> None:
        raise AssertionError("not in these tests")

    def run_progress(self, repo: str, run_id: int) -> RunProgress:
        raise AssertionError("not in these tests")


class DescribingPool(FakePool):
    """A pool that can also say how instances ended, as AwsAsgPool does."""

    def instance_ends(self, instance_ids: Sequence[str]) -> Mapping[str, InstanceEnd]:
        return {}


def runtime(source: RetryingSource, *, webhook: bool, fake_pool: FakePool | None = None) -> Runtime:
    c: Config = config(rtype(pools=(POOL,)))
    c = c.model_copy(
        update={"state": StateConfig(path=":memory:"), "job_retry": JobRetryConfig(enabled=True)}
    )
    if webhook:
        c = c.model_copy(update={"webhook": WebhookConfig(secret=Secret("s3cret"))})
    return build_runtime(
        c,
        Metrics(CollectorRegistry()),
        source=source,
        pool=fake_pool or FakePool({POOL: pool(POOL)}),
        parameters=FakeParameters(),
        webhooks=webhook,
    )


def stage_of(r: Runtime) -> RetryStage:
    stage = r.controller.retries
    assert isinstance(stage, RetryStage)
    return stage


def test_polling_alone_feeds_job_retry_from_the_poll() -> None:
    source = RetryingSource()
    r = runtime(source, webhook=False)
    try:
        assert stage_of(r).source is source
    finally:
        r.close()


def test_with_webhooks_job_retry_reads_the_completed_events_and_reruns_through_the_poll() -> None:
    source = RetryingSource()
    r = runtime(source, webhook=True)
    try:
        assert r.webhooks is not None
        feed = stage_of(r).source
        assert isinstance(feed, WebhookCompletedRuns)
        assert feed.index is r.webhooks.source.index
        assert feed.polled is source
    finally:
        r.close()


def test_job_retry_asks_the_cloud_pool_how_an_instance_ended_when_it_can() -> None:
    """The stage's InstanceFates port is the cloud pool (AwsAsgPool reads EC2's
    StateReason); a pool without the call leaves the stage on events alone."""
    describing = DescribingPool({POOL: pool(POOL)})
    for given, expected in ((describing, describing), (FakePool({POOL: pool(POOL)}), None)):
        r = runtime(RetryingSource(), webhook=False, fake_pool=given)
        try:
            assert stage_of(r).fates is expected
        finally:
            r.close()
