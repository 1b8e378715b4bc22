"""The fake GitHub's webhooks: signed ``workflow_job`` deliveries to a configured URL.

As GitHub sends them (``docs.github.com``, "Webhook events and payloads" and "Validating
webhook deliveries"): ``POST`` with ``Content-Type: application/json``, the headers
``X-GitHub-Event``, ``X-GitHub-Delivery`` (a GUID; a redelivery reuses it),
``X-GitHub-Hook-ID`` and ``X-Hub-Signature-256`` (HMAC-SHA256 of the body with the
secret); the payload has ``action``, ``workflow_job`` (the REST job object), the
``repository`` and ``organization`` as webhooks embed them, and the ``sender``. Each
payload validates against ``@octokit/webhooks-schemas`` (``tests/conformance``).

Delivery is off the caller's thread (one sender thread, in order), so the fake's state
changes never wait for the receiver. Like GitHub, a failed delivery (an error or a non-2xx
answer) is recorded and not retried. To test the reconcile, a seeded share of deliveries
is dropped (never sent), duplicated (sent twice with the same delivery id) or reordered
(held back and sent after the next one).

Like GitHub, every attempt goes into the hook's **delivery log** (:attr:`WebhookSender.log`,
served by :mod:`autoscaler.fakes.github_deliveries`), a ``hook-delivery-item`` each: a
dropped delivery as GitHub shows one it could not make (``status`` "failed to connect",
``status_code`` 502, the description's example), a non-2xx answer as ``Invalid HTTP
Response: <code>``. :meth:`WebhookSender.redeliver` sends a logged delivery again (the same
body and ``X-GitHub-Delivery``, ``redelivery: true`` in the log); the drop share applies to
it too, as a redelivery on GitHub can fail again.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx

from autoscaler.fakes.github_repo_shapes import repo_json, user_json
from autoscaler.fakes.github_shapes import job_json
from autoscaler.observe.github.webhooks import sign

if TYPE_CHECKING:
    from autoscaler.fakes.github_state import GitHubState

log = logging.getLogger(__name__)

_ORG_ID = 9919
_SENDER_ID = 583231
HOOK_ID = 4242
#: A reordered delivery waits at most this long for the next one to overtake it.
HOLD_SECONDS = 0.5
#: Delivery log ids start above this (GitHub's are large 64-bit numbers).
_DELIVERY_BASE = 7_000_000_000
#: A queued delivery: action, job id, body, guid (``X-GitHub-Delivery``), redelivery.
_Item = tuple[str, int, bytes, str, bool]


@dataclass(frozen=True)
class Sent:
    """One delivery attempt: what went out and GitHub's view of its outcome."""

    delivery: str
    action: str
    job_id: int
    status: int | None
    """The receiver's HTTP status; None when the request failed."""
    at: datetime


@dataclass(frozen=True)
class LogEntry:
    """One attempt in the hook's delivery log (a ``hook-delivery-item``)."""

    id: int
    guid: str
    delivered_at: datetime
    redelivery: bool
    duration: float
    status: str
    status_code: int
    action: str
    repository_id: int | None

    def item(self) -> dict[str, Any]:
        """As ``GET /orgs/{org}/hooks/{hook_id}/deliveries`` lists it."""
        return {
            "id": self.id,
            "guid": self.guid,
            "delivered_at": self.delivered_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "redelivery": self.redelivery,
            "duration": round(self.duration, 2),
            "status": self.status,
            "status_code": self.status_code,
            "event": "workflow_job",
            "action": self.action,
            "installation_id": None,
            "repository_id": self.repository_id,
            "throttled_at": None,
        }


@dataclass
class Faults:
    """Seeded shares of deliveries dropped, duplicated and reordered (0 to 1 each)."""

    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    seed: int = 0
    rng: random.Random = field(init=False)
    """Drops (drawn on the caller's thread)."""
    send_rng: random.Random = field(init=False)
    """Duplicates and reorders (drawn on the sender thread): one generator per thread
    keeps a seed's choices the same whatever the threads' interleaving."""

    redo_rng: random.Random = field(init=False)
    """Drops of redeliveries (drawn on the fake server's threads, under the lock)."""

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)  # noqa: S311 - a test's seeded faults
        self.send_rng = random.Random(self.seed + 1)  # noqa: S311
        self.redo_rng = random.Random(self.seed + 2)  # noqa: S311


def _webhook_user(base: str, login: str, user_id: int, kind: str) -> dict[str, Any]:
    user = user_json(base, login, user_id, kind)
    user.pop("user_view_type", None)  # REST shows it; webhook payloads do not carry it
    return user


def workflow_job_payload(state: GitHubState, job_id: int, action: str) -> dict[str, Any]:
    """The ``workflow_job`` payload GitHub would send for this job now."""
    with state.lock:
        job = state.job(job_id)
        base = state.url
        now = state.clock()
        repo = state._repos[job.repo]
        item = job_json(base, state.owner, job, now)
        kind = "User" if state.owner_kind == "user" else "Organization"
        repository = repo_json(base, state.owner, repo, state.owner_kind)
    repository["owner"] = _webhook_user(base, state.owner, _ORG_ID, kind)
    repository.pop("permissions", None)
    repository.update(license=None, custom_properties={})
    if item["status"] == "completed":
        item["conclusion"] = item["conclusion"] or "success"
    payload: dict[str, Any] = {
        "action": action,
        "workflow_job": item,
        "repository": repository,
        "sender": _webhook_user(base, "octocat", _SENDER_ID, "User"),
    }
    if state.owner_kind == "org":
        api = f"{base}/orgs/{state.owner}"
        payload["organization"] = {
            "login": state.owner,
            "id": _ORG_ID,
            "node_id": f"O_{_ORG_ID}",
            "url": api,
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events",
            "hooks_url": f"{api}/hooks",
            "issues_url": f"{api}/issues",
            "members_url": f"{api}/members{{/member}}",
            "public_members_url": f"{api}/public_members{{/member}}",
            "avatar_url": f"https://avatars.githubusercontent.com/u/{_ORG_ID}?v=4",
            "description": None,
        }
    return payload


class WebhookSender:
    """Sends the fake's ``workflow_job`` events, signed, to ``url`` (see module doc)."""

    def __init__(
        self,
        state: GitHubState,
        url: str,
        secret: bytes,
        *,
        faults: Faults | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.state = state
        self.url = url
        self._secret = secret
        self.faults = faults or Faults()
        self.sent: list[Sent] = []
        self.dropped: list[tuple[int, str]] = []
        self.payloads: list[dict[str, Any]] = []
        #: The hook's delivery log, oldest first (GitHub lists it newest first).
        self.log: list[LogEntry] = []
        self._bodies: dict[str, tuple[str, int, bytes, int | None]] = {}
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._held: _Item | None = None
        self._client = httpx.Client(timeout=timeout)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._thread = threading.Thread(target=self._run, name="fake-webhooks", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"WebhookSender(url={self.url!r})"

    def job_event(self, job_id: int, action: str) -> None:
        """Queue the delivery of this job's ``action`` event (built from the state now)."""
        payload = workflow_job_payload(self.state, job_id, action)
        guid = str(uuid.uuid4())
        body = json.dumps(payload).encode()
        repository_id = payload["repository"].get("id")
        with self._lock:
            self.payloads.append(payload)
            self._bodies[guid] = (action, job_id, body, repository_id)
            if self.faults.drop and self.faults.rng.random() < self.faults.drop:
                self.dropped.append((job_id, action))
                self._record(guid, action, repository_id, None, redelivery=False)
                return
            self._pending += 1
        self._queue.put((action, job_id, body, guid, False))

    def redeliver(self, delivery_id: int) -> bool:
        """``POST .../deliveries/{id}/attempts``: send that delivery again, later (False:
        no such delivery). The drop share applies: a redelivery can fail again."""
        with self._lock:
            entry = next((e for e in self.log if e.id == delivery_id), None)
            if entry is None:
                return False
            action, job_id, body, repository_id = self._bodies[entry.guid]
            if self.faults.drop and self.faults.redo_rng.random() < self.faults.drop:
                self._record(entry.guid, action, repository_id, None, redelivery=True)
                return True
            self._pending += 1
        self._queue.put((action, job_id, body, entry.guid, True))
        return True

    def _record(
        self,
        guid: str,
        action: str,
        repository_id: int | None,
        status: int | None,
        *,
        redelivery: bool,
        duration: float = 0.0,
    ) -> None:
        """One attempt into the delivery log (the caller holds the lock)."""
        if status is None:
            text, code = "failed to connect", 502
        elif 200 <= status < 300:
            text, code = "OK", status
        else:
            text, code = f"Invalid HTTP Response: {status}", status
        self.log.append(
            LogEntry(
                id=_DELIVERY_BASE + len(self.log) + 1,
                guid=guid,
                delivered_at=self.state.clock(),
                redelivery=redelivery,
                duration=duration,
                status=text,
                status_code=code,
                action=action,
                repository_id=repository_id,
            )
        )

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Until every queued delivery was attempted (held-back ones included)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(10)
        self._client.close()

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=HOLD_SECONDS if self._held else None)
            except queue.Empty:  # nothing came after the held one: it goes now, late
                held, self._held = self._held, None
                if held is not None:
                    self._deliver(*held)
                continue
            if item is None:
                if self._held is not None:
                    self._deliver(*self._held)
                return
            reorder = self.faults.reorder
            if self._held is None and reorder and self.faults.send_rng.random() < reorder:
                self._held = item  # sent after the next one
                continue
            self._deliver(*item)
            if self._held is not None:
                held, self._held = self._held, None
                self._deliver(*held)

    def _deliver(
        self, action: str, job_id: int, body: bytes, delivery: str, redelivery: bool
    ) -> None:
        times = (
            2
            if not redelivery
            and self.faults.duplicate
            and self.faults.rng.random() < self.faults.duplicate
            else 1
        )
        for _ in range(times):
            self._post(delivery, action, job_id, body, redelivery)
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def _post(self, delivery: str, action: str, job_id: int, body: bytes, redelivery: bool) -> None:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/fake",
            "X-GitHub-Event": "workflow_job",
            "X-GitHub-Delivery": delivery,
            "X-GitHub-Hook-ID": str(HOOK_ID),
            "X-Hub-Signature-256": sign(self._secret, body),
        }
        status: int | None
        started = time.monotonic()
        try:
            status = self._client.post(self.url, content=body, headers=headers).status_code
        except httpx.HTTPError as exc:
            log.debug("fake webhook delivery %s failed: %s", delivery, type(exc).__name__)
            status = None
        with self._lock:
            self.sent.append(Sent(delivery, action, job_id, status, self.state.clock()))
            repository_id = self._bodies[delivery][3]
            self._record(
                delivery,
                action,
                repository_id,
                status,
                redelivery=redelivery,
                duration=time.monotonic() - started,
            )
