"""The fake GitHub's org webhook delivery log: list it, redeliver one attempt.

As GitHub's OpenAPI description documents them (``tests/conformance`` checks it):

- ``GET /orgs/{org}/hooks/{hook_id}/deliveries`` (``orgs/list-webhook-deliveries``): the
  hook's attempts newest first, ``hook-delivery-item`` each, ``per_page`` (default 30,
  at most 100), cursor pagination: the ``Link`` header's ``rel="next"`` carries a
  ``cursor`` (opaque to clients; here ``v1_<the next page's first id>``), and ``status``
  (``success``: a ``status_code`` of 200-399; ``failure``: 400-599) filters;
- ``POST /orgs/{org}/hooks/{hook_id}/deliveries/{delivery_id}/attempts``
  (``orgs/redeliver-webhook-delivery``): 202 with an empty object; the attempt is made
  later, off the request (:meth:`~.github_webhooks.WebhookSender.redeliver`).

Both count against the primary rate limit; the listing has an ``ETag`` and answers a
matching ``If-None-Match`` with a free 304, like every listing of the fake. The hook is
:data:`~.github_webhooks.HOOK_ID`, and exists only while the fake sends webhooks
(:meth:`~.github.FakeGitHub.send_webhooks`); another id, or a user account, is a
404. Permissions are not modelled: inject a 403 (``inject_fault``) to test one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from urllib.parse import urlencode

from autoscaler.fakes.github_shapes import Reply, error_reply
from autoscaler.fakes.github_state import GitHubState
from autoscaler.fakes.github_webhooks import HOOK_ID, LogEntry, WebhookSender

DELIVERIES = re.compile(r"^/orgs/([^/]+)/hooks/(\d+)/deliveries$")
ATTEMPTS = re.compile(r"^/orgs/([^/]+)/hooks/(\d+)/deliveries/(\d+)/attempts$")

#: ``x-ratelimit-*`` headers, one request spent (``count``) or not (a 304).
RateHeaders = Callable[[bool], dict[str, str]]


def _hook(fake: GitHubState, org: str, hook_id: str) -> WebhookSender | None:
    """The hook's sender when ``org``/``hook_id`` name the one hook the fake has."""
    if fake.owner_kind != "org" or org.lower() != fake.owner.lower() or int(hook_id) != HOOK_ID:
        return None
    return fake.webhooks if isinstance(fake.webhooks, WebhookSender) else None


def _per_page(text: str | None) -> int:
    try:
        return min(100, max(1, int(text))) if text is not None else 30
    except ValueError:
        return 30


def _wanted(entry: LogEntry, status: str | None) -> bool:
    if status == "success":
        return 200 <= entry.status_code < 400
    if status == "failure":
        return 400 <= entry.status_code < 600
    return True


def list_deliveries(  # noqa: PLR0917
    fake: GitHubState,
    org: str,
    hook_id: str,
    query: dict[str, str],
    if_none_match: str | None,
    rate: RateHeaders,
    etag_matches: Callable[[str, str], bool],
) -> Reply:
    """One page of the hook's delivery log, newest first."""
    sender = _hook(fake, org, hook_id)
    if sender is None:
        return error_reply(404, "Not Found", rate(True))
    status = query.get("status")
    if status not in (None, "success", "failure"):
        return error_reply(422, "Invalid value for status", rate(True))
    with sender._lock:
        entries = [e for e in reversed(sender.log) if _wanted(e, status)]
    cursor = query.get("cursor")
    if cursor is not None:
        if not re.fullmatch(r"v1_\d+", cursor):
            return error_reply(400, "Invalid cursor", rate(True))
        first = int(cursor[3:])
        entries = [e for e in entries if e.id <= first]
    per_page = _per_page(query.get("per_page"))
    page, rest = entries[:per_page], entries[per_page:]
    reply = Reply(200, [e.item() for e in page])
    etag = 'W/"' + hashlib.sha256(reply.raw).hexdigest()[:40] + '"'
    headers = {"etag": etag}
    if rest:
        params = {k: v for k, v in query.items() if k != "cursor"}
        params["cursor"] = f"v1_{rest[0].id}"
        url = f"{fake.url}/orgs/{org}/hooks/{hook_id}/deliveries?{urlencode(params)}"
        headers["link"] = f'<{url}>; rel="next"'
    if if_none_match and etag_matches(if_none_match, etag):
        headers.update(rate(False))
        return Reply(304, None, headers)
    headers.update(rate(True))
    reply.headers = headers
    return reply


def redeliver(
    fake: GitHubState, org: str, hook_id: str, delivery_id: str, rate: RateHeaders
) -> Reply:
    """Ask for one more attempt of a logged delivery: 202, or 404."""
    headers = rate(True)
    sender = _hook(fake, org, hook_id)
    if sender is None or not sender.redeliver(int(delivery_id)):
        return error_reply(404, "Not Found", headers)
    return Reply(202, {}, headers)
