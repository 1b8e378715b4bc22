"""Wiring for GitHub webhooks: the receiver, the index-backed source, the wake-up and the
reaction clock. Chosen here (and in :mod:`autoscaler.app.wiring`) and nowhere else.

``ci_autoscaler_reaction_seconds`` is measured here, after each tick: a job whose
``queued`` event that tick applied, of a runner type the same tick scaled up, observes the
time from the event's arrival to the end of that tick (its ``SetDesiredCapacity`` call
was in it). A job whose event caused no capacity request (an idle runner was there, the
type was at its max) observes nothing: a later scale-up is not its reaction.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from autoscaler.app.service import Wakeup
from autoscaler.config import Config, WebhookConfig
from autoscaler.controller import Controller, TickResult
from autoscaler.domain import JobStatus, RunnerType
from autoscaler.errors import StateError
from autoscaler.observe.github.delivery_watch import DeliveryWatch
from autoscaler.observe.github.source import GitHubSource
from autoscaler.observe.github.webhook_receiver import WebhookReceiver
from autoscaler.observe.github.webhook_rows import JobIndexStore
from autoscaler.observe.github.webhook_source import WebhookSource
from autoscaler.observe.queue import match_job
from autoscaler.ports import JobSource
from autoscaler.scale.plan import SCALE_UP
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Reactions:
    """Observes ``reaction_seconds`` from the source's queued events and a tick's scale-ups."""

    def __init__(
        self,
        source: WebhookSource,
        types: Sequence[RunnerType],
        metrics: Metrics,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.source = source
        self.types = tuple(types)
        self.metrics = metrics
        self.clock = clock

    def after_tick(self, result: TickResult | None) -> list[float]:
        """Observe the reactions this tick caused; returns them (seconds)."""
        if result is None:
            return []
        now = self.clock()
        scaled = {
            d.runner_type
            for d in result.decisions
            if getattr(d, "action", None) == SCALE_UP and not result.dry_run
        }
        observed: list[float] = []
        pending, self.source.queued_received = self.source.queued_received, {}
        for job_id, received in pending.items():
            job = self.source.index.get(job_id)
            if job is None or job.status is not JobStatus.QUEUED:
                continue
            rtype = match_job(job.labels, self.types)
            if rtype is not None and rtype.name in scaled:
                seconds = max(0.0, (now - received).total_seconds())
                self.metrics.reaction_seconds.observe(seconds)
                observed.append(seconds)
        return observed


#: Seconds between the leader's reads of the index's wake-up item (one GetItem each).
WATCH_EVERY = 1.0


class IndexWatcher:
    """The acting controller's watch on the store's job index: when another replica
    accepted a ``queued`` event (the wake-up token moved), the tick is woken at once, as
    this process's own listener would wake it. A follower reads nothing here (its ticks
    read the index anyway); a store with no other writer (SQLite) is never watched."""

    def __init__(
        self,
        store: JobIndexStore,
        acting: Callable[[], bool],
        notify: Callable[[], None],
        metrics: Metrics,
        *,
        every: float = WATCH_EVERY,
    ) -> None:
        self.store = store
        self.acting = acting
        self.notify = notify
        self.metrics = metrics
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-index-watch", daemon=True)
        self._seen: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def step(self) -> bool:
        """One look; True when it woke the tick."""
        if not self.acting():
            self._seen = None  # a new leader's first look only learns the token
            return False
        try:
            version = self.store.job_index_version()
        except StateError as exc:
            self.metrics.webhook_store_errors.labels("watch", exc.code or "error").inc()
            log.debug("job index watch: %s", exc)
            return False
        moved = self._seen is not None and version != self._seen
        self._seen = version
        if moved:
            self.notify()
        return moved

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.step()


@dataclass
class Webhooks:
    """The webhook parts of a runtime (``cmd_run`` serves the receiver)."""

    config: WebhookConfig
    receiver: WebhookReceiver
    source: WebhookSource
    wake: Wakeup
    reactions: Reactions
    watcher: IndexWatcher | None = field(default=None)
    """Set when the store is shared by several controllers (DynamoDB)."""

    def on_tick(self, controller: Controller) -> Callable[[], None]:
        """The loop's after-tick hook: observe the reactions of the tick just run."""

        def hook() -> None:
            self.reactions.after_tick(controller.last_result)

        return hook


def attach(
    config: Config,
    metrics: Metrics,
    source: JobSource,
    *,
    store: JobIndexStore | None = None,
    acting: Callable[[], bool] = lambda: True,
    shared: bool = False,
    clock: Callable[[], datetime] = _utc_now,
) -> Webhooks:
    """Wrap ``source`` so ticks read the webhook index between reconciles; with ``store``
    the index lives there (every replica writes what it receives, ticks read it back);
    ``shared``: other controllers write it too (the leader watches it to wake at once)."""
    hook = config.webhook
    if hook is None:
        raise ValueError("no webhook section")
    wake = Wakeup(hook.debounce)
    receiver = WebhookReceiver(hook, metrics, on_event=wake.notify, store=store, clock=clock)
    deliveries = None
    if hook.hook_id is not None:
        if isinstance(source, GitHubSource):
            deliveries = DeliveryWatch(
                source.delivery_log(hook.hook_id),
                metrics,
                first_window=hook.reconcile_interval,
            )
        else:
            log.warning("webhook.hook_id ignored: the job source is not GitHub's REST API")
    wrapped = WebhookSource(
        source,
        receiver,
        hook,
        metrics,
        poll_interval=config.poll_interval,
        store=store,
        acting=acting,
        deliveries=deliveries,
    )
    types = [rt.runner_type for rt in config.runner_types]
    watcher = None
    if store is not None and shared:
        watcher = IndexWatcher(store, acting, wake.notify, metrics)
    return Webhooks(hook, receiver, wrapped, wake, Reactions(wrapped, types, metrics), watcher)
