"""Pure: what a webhook's delivery log says about lost ``workflow_job`` deliveries.

GitHub keeps a log of every attempt to deliver a webhook (``GET
/orgs/{org}/hooks/{hook_id}/deliveries``, newest first) and never redelivers a failed one on
its own: its docs, "Automatically redelivering failed deliveries", build exactly this
from the log and ``POST .../deliveries/{id}/attempts``. The log is also the only evidence
the controller can get that *no* delivery was lost: a reconcile that read the log back to
the previous read and found every ``workflow_job`` attempt in between delivered has no
reason to re-list what it lists only in case a delivery was lost.

The decisions here, pure functions of the attempts read:

- :func:`classify`: an attempt's answer. ``ok``: 2xx, and 409 (our listener's answer to a
  delivery it already has: the index holds it). ``retry``: no answer (GitHub logs
  ``status_code`` 0 or a 5xx for a refused or timed-out connection), 408, 429 and 5xx
  (our listener's 503 when its queue or store cannot take it): a redelivery can succeed.
  ``permanent``: any other answer (401 a wrong secret, 400/422 a payload we refuse, 413,
  a redirect GitHub does not follow): the same payload would get the same answer, so it
  is not redelivered, only counted and logged.
- :func:`review`: which deliveries to redeliver (the newest failed attempt of each event,
  its ``guid``, that no attempt delivered), which failed for good, and whether the window
  since the previous read is *clean*: read completely, no item skipped, and every
  ``workflow_job`` attempt not judged before delivered, or its event delivered by a later
  attempt in the same read. An event judged before is not judged again (an attempt's
  ``id`` is unique; ``judged``), so a failure the previous reconcile listed around does
  not make the next window unclean; a redelivery that failed again does.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.observe.github.parse import HookDeliveryItem, model

#: The log is read back to the newest attempt the previous read saw minus this (seconds):
#: an attempt GitHub was still making then shows up late, with its start as
#: ``delivered_at`` (GitHub gives a delivery 10 seconds to answer).
MARGIN_SECONDS = 30.0
#: Pages of 100 attempts one read may take before it stops (incomplete: not clean).
MAX_PAGES = 20
#: Redelivery requests one reconcile may make (the rest wait for the next one).
MAX_REDELIVERIES = 100
#: The one event the controller subscribes to.
EVENT = "workflow_job"


class Result(enum.Enum):
    """An attempt's outcome, as far as redelivering goes."""

    OK = "ok"
    RETRY = "retry"
    PERMANENT = "permanent"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One ``hook-delivery-item`` of the log (the fields the decisions read)."""

    id: int
    guid: str
    delivered_at: float
    """Unix time the attempt began."""
    redelivery: bool
    status_code: int
    event: str
    action: str | None = None


def parse_attempt(item: Any) -> Attempt:
    """A ``hook-delivery-item`` (GitHub's OpenAPI description; the model already, or plain
    JSON values) as an :class:`Attempt`. Raises BadItem."""
    got = model(HookDeliveryItem, item)
    return Attempt(
        got.id,
        got.guid,
        got.delivered_at.timestamp(),
        got.redelivery,
        got.status_code,
        got.event,
        got.action,
    )


def classify(status_code: int) -> Result:
    """What a redelivery of an attempt answered ``status_code`` can achieve."""
    if 200 <= status_code < 300 or status_code == 409:
        return Result.OK
    if status_code in (0, 408, 429) or status_code >= 500:
        return Result.RETRY
    return Result.PERMANENT


def read_enough(page: Sequence[Attempt], since: float | None) -> bool:
    """A page reaches back past ``since`` (pages are newest first): stop reading."""
    return since is not None and any(a.delivered_at < since for a in page)


@dataclass(frozen=True)
class Review:
    """What one read of the log decided."""

    redeliver: tuple[Attempt, ...]
    """The newest failed attempt of each event to redeliver (at most the cap)."""
    permanent: tuple[Attempt, ...]
    """New failed attempts a redelivery cannot fix (not redelivered)."""
    postponed: tuple[Attempt, ...]
    """Events to redeliver beyond the cap: the next reconcile's (judged again then)."""
    failed: int
    """Events with a new failed attempt and no delivered one."""
    clean: bool
    """No ``workflow_job`` delivery was lost since the previous read."""


def review(
    attempts: Iterable[Attempt],
    *,
    judged: Container[int],
    since: float | None,
    complete: bool,
    skipped: int = 0,
    max_redeliveries: int = MAX_REDELIVERIES,
) -> Review:
    """Judge the attempts of one read (see the module doc).

    ``judged``: attempt ids judged by an earlier read; ``since``: attempts older than this
    are not judged (None: every one read is); ``complete``: the read reached ``since`` or
    the log's end; ``skipped``: items of the read that could not be parsed."""
    by_guid: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        if attempt.event == EVENT:
            by_guid.setdefault(attempt.guid, []).append(attempt)
    redeliver: list[Attempt] = []
    permanent: list[Attempt] = []
    failed = 0
    for tries in by_guid.values():
        if any(classify(a.status_code) is Result.OK for a in tries):
            continue  # delivered: the index has it
        new = [
            a for a in tries if a.id not in judged and (since is None or a.delivered_at >= since)
        ]
        if not new:
            continue  # judged before: that reconcile listed around it
        failed += 1
        newest = max(tries, key=lambda a: (a.delivered_at, a.id))
        if classify(newest.status_code) is Result.RETRY:
            redeliver.append(newest)
        else:
            permanent.append(newest)
    redeliver.sort(key=lambda a: (a.delivered_at, a.id))
    return Review(
        redeliver=tuple(redeliver[:max_redeliveries]),
        permanent=tuple(permanent),
        postponed=tuple(redeliver[max_redeliveries:]),
        failed=failed,
        clean=complete and skipped == 0 and failed == 0,
    )
