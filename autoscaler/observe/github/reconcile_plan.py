"""Pure: which runs' job listings a webhook reconcile must read again, and why.

Between two reconciles of :class:`~autoscaler.observe.github.webhook_source.WebhookSource`
almost every in-progress run's job listing changes (its steps move on), so re-reading
them all would be counted against the rate limit for nothing the queue math uses: a job
running on a runner is not demand. With the webhooks flowing, the reconcile re-lists the
runs listings of every repository (a run GitHub created whose deliveries were all lost
shows there; an unchanged listing is a 304, which GitHub does not count against the
primary rate limit) and the jobs of a run only when something says the index may be
wrong about it:

- ``new``: its jobs were never listed (a run the webhooks may have told nothing of);
- ``stale``: last listed longer ago than ``max_age`` (a bound on anything else missed);
- ``status``: the run moved to another runs listing (a re-run queues new jobs);
- ``event``: a ``queued``, ``waiting`` or ``completed`` delivery about one of its jobs
  arrived since its last listing (a job appeared, or one ended and its dependents queue
  next: a lost delivery of theirs would hide there). ``in_progress`` deliveries do not
  count: a lost one shows in the runner list (``queued`` below);
- ``waiting``: the index or the last listing holds a job waiting for an approval (its
  lost ``queued`` would hide demand, and no runner shows it);
- ``queued``: the index or the last listing holds a queued job, and GitHub's runner
  list shows a busy runner no job of the index explains (a job started whose
  ``in_progress`` was lost: which one is unknown, so every run with a queued job is
  read; else the lost ``in_progress`` would leave a phantom queued job, capacity asked
  for nothing). With every busy runner explained, no queued job started unseen;
- ``runner``: a job of it runs, per the index, on a runner GitHub's runner list shows
  idle or does not list, or that another job of the index runs on too (its
  ``completed`` was lost: the runner would look busy);
- ``settled`` (skipped): every job known runs on a runner GitHub shows busy, and nothing
  happened since (its step churn does not matter to the queue math); or its queued jobs
  cannot have started unseen, by the runner list.

A conditional request for a run that did not change is a 304 and costs nothing; the
saving is in the settled runs, whose listings did change and would each be counted.

When the webhook's delivery log vouches for every window since a run's last listing (no
delivery GitHub attempted was lost), :func:`trusted_reason` decides instead. What the log
cannot show is a delivery GitHub never attempted, so only the reasons that bound that
remain, each a fact about the run rather than about the deliveries:

- ``new``: GitHub lists the run live and its jobs were never listed, and the index holds
  no live job of it (the webhooks told nothing of it);
- ``hidden``: GitHub lists the run live, but neither the index nor its last listing holds
  a live job of it (its known jobs ended; one GitHub never told of may wait);
- ``status``: as above (a re-run);
- ``stale``: its last listing, or its creation when never listed, is ``max_age`` old. A
  run is listed when *its* bound comes due, not because a sweep came round: a run that
  ends within ``max_age`` of its creation, its every delivery received, is never listed.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from autoscaler.domain import Job, JobStatus

#: A settled run's jobs are listed again at least this often (seconds): a bound on what
#: a double loss (a job's delivery and every delivery after it in its run) can hide.
MAX_AGE_SECONDS = 3600.0


class Reason(enum.Enum):
    """Why a run's jobs are listed at a reconcile (``SETTLED``: they are not)."""

    NEW = "new"
    STALE = "stale"
    STATUS = "status"
    EVENT = "event"
    WAITING = "waiting"
    QUEUED = "queued"
    RUNNER = "runner"
    HIDDEN = "hidden"
    SETTLED = "settled"


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the poll knows of one run: its last job listing and the run listings."""

    run_id: int
    listed_jobs: tuple[Job, ...]
    listed_at: float | None
    """Unix time of the last job listing; None: never listed."""
    status_changed: bool = False
    """The run showed in another status's runs listing than at its last one."""
    created_at: float | None = None
    """Unix time GitHub created the run (its runs listing); None: unknown."""
    listed_live: bool = False
    """This reconcile's runs listings of its repository, read completely, show it live."""


def _known(run: RunFacts, live: Iterable[Job], completed: Container[int]) -> dict[int, Job]:
    """The run's jobs not known to have ended: the index's live ones, and those of its last
    listing that neither the listing nor the index holds completed."""
    known = {job.id: job for job in live}
    for job in run.listed_jobs:
        if job.status is not JobStatus.COMPLETED and job.id not in completed:
            known.setdefault(job.id, job)
    return known


def jobs_reason(
    run: RunFacts,
    live: Iterable[Job],
    completed: Container[int],
    *,
    last_event_at: datetime | None,
    runners_busy: Mapping[str, bool],
    busy_unexplained: bool,
    now: float,
    max_age: float = MAX_AGE_SECONDS,
) -> Reason:
    """Whether (and why) to list this run's jobs again at a reconcile.

    ``live``: the index's live jobs of this run; ``completed``: job ids the index holds
    completed; ``last_event_at``: the last accepted delivery about a job of this run;
    ``runners_busy``: GitHub's runner list of this reconcile, name -> busy;
    ``busy_unexplained``: a runner of that list is busy on no job the index holds in
    progress (:func:`unexplained_busy`)."""
    if run.listed_at is None:
        return Reason.NEW
    if now - run.listed_at >= max_age:
        return Reason.STALE
    if run.status_changed:
        return Reason.STATUS
    if last_event_at is not None and last_event_at.timestamp() > run.listed_at:
        return Reason.EVENT
    known = _known(run, live, completed)
    statuses = {job.status for job in known.values()}
    if statuses - {JobStatus.IN_PROGRESS, JobStatus.QUEUED}:
        return Reason.WAITING
    if busy_unexplained and JobStatus.QUEUED in statuses:
        return Reason.QUEUED
    for job in known.values():
        if job.status is not JobStatus.IN_PROGRESS:
            continue
        if not job.runner_name or not runners_busy.get(job.runner_name, False):
            return Reason.RUNNER
    return Reason.SETTLED


def unexplained_busy(runners_busy: Mapping[str, bool], running_on: Container[str]) -> bool:
    """A runner GitHub lists busy runs no job the index holds in progress (``running_on``:
    the runner names of those jobs): some job started whose ``in_progress`` was lost."""
    return any(busy and name not in running_on for name, busy in runners_busy.items())


def trusted_reason(
    run: RunFacts,
    live: Iterable[Job],
    completed: Container[int],
    *,
    now: float,
    max_age: float = MAX_AGE_SECONDS,
) -> Reason:
    """Whether (and why) to list this run's jobs at a reconcile whose delivery log vouches
    for every window since the run's last listing (see the module doc): only for what a
    delivery GitHub never attempted can hide. ``live`` and ``completed`` as for
    :func:`jobs_reason`."""
    if run.status_changed:
        return Reason.STATUS
    if not _known(run, live, completed):
        if not run.listed_live:
            return Reason.SETTLED  # ended, as far as anyone told (the next runs listing checks)
        return Reason.NEW if run.listed_at is None else Reason.HIDDEN
    since = run.listed_at if run.listed_at is not None else run.created_at
    if since is None or now - since >= max_age:
        return Reason.STALE
    return Reason.SETTLED
