"""The fake GitHub's issues, for the ``github_issue`` alert receiver.

Endpoints, with the shapes GitHub's REST docs give (API version 2022-11-28):
``POST /repos/{o}/{r}/issues`` ("Create an issue": 201 and the issue; 422 without a
title), ``GET /repos/{o}/{r}/issues`` ("List repository issues": ``state`` open (default) /
closed / all, ``labels`` a comma-separated list the issue must all carry, ``sort``
created/updated, ``direction``; paginated by the server like every listing),
``PATCH /repos/{o}/{r}/issues/{n}`` ("Update an issue": ``state``, ``state_reason``,
``title``, ``body``) and ``POST /repos/{o}/{r}/issues/{n}/comments`` ("Create an issue
comment": 201). Numbers count from 1 per repository.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from autoscaler.fakes.github_repo_shapes import user_json
from autoscaler.fakes.github_shapes import Reply, error_reply, iso

ISSUES = re.compile(r"^/repos/([^/]+)/([^/]+)/issues$")
ISSUE = re.compile(r"^/repos/([^/]+)/([^/]+)/issues/(\d+)$")
COMMENTS = re.compile(r"^/repos/([^/]+)/([^/]+)/issues/(\d+)/comments$")
#: Who the token belongs to: the issues and comments it writes are its.
BOT_LOGIN, BOT_ID = "ci-autoscaler[bot]", 41898282


@dataclass
class FakeIssue:
    id: int
    number: int
    repo: str
    title: str
    body: str | None
    labels: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    state: str = "open"
    state_reason: str | None = None
    closed_at: datetime | None = None
    comments: list[str] = field(default_factory=list)


class IssueTracker:
    """Issues per repository. Thread-safe; the server calls :meth:`handle`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._issues: dict[str, list[FakeIssue]] = {}
        self._next_id = 5_000_000

    def issues(self, repo: str) -> list[FakeIssue]:
        """The repository's issues, oldest first (the test's view)."""
        with self._lock:
            return list(self._issues.get(repo, []))

    def listing(self, repo: str, query: dict[str, str]) -> list[FakeIssue]:
        state = query.get("state", "open")
        wanted = {name.strip() for name in query.get("labels", "").split(",") if name.strip()}
        with self._lock:
            found = [
                i
                for i in self._issues.get(repo, [])
                if state in ("all", i.state) and wanted <= set(i.labels)
            ]
        key = "updated_at" if query.get("sort") == "updated" else "created_at"
        newest_first = query.get("direction", "desc") != "asc"
        return sorted(found, key=lambda i: (getattr(i, key), i.number), reverse=newest_first)

    def handle(
        self, base: str, owner: str, method: str, path: str, *, raw: bytes, now: datetime
    ) -> Reply | None:
        """A POST or PATCH on the issue endpoints, or None when the path is not one."""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return error_reply(400, "Problems parsing JSON")
        if not isinstance(body, dict):
            return error_reply(400, "Problems parsing JSON")
        if method == "POST" and (m := ISSUES.match(path)):
            if not isinstance(body.get("title"), str) or not body["title"]:
                return error_reply(422, "Validation Failed")
            with self._lock:
                self._next_id += 1
                repo = m.group(2)
                issue = FakeIssue(
                    id=self._next_id,
                    number=len(self._issues.get(repo, [])) + 1,
                    repo=repo,
                    title=body["title"],
                    body=body.get("body"),
                    labels=tuple(str(label) for label in body.get("labels") or ()),
                    created_at=now,
                    updated_at=now,
                )
                self._issues.setdefault(repo, []).append(issue)
            return Reply(201, issue_json(base, owner, issue))
        if method == "PATCH" and (m := ISSUE.match(path)):
            issue_or_none = self._find(m.group(2), int(m.group(3)))
            if issue_or_none is None:
                return error_reply(404, "Not Found")
            with self._lock:
                issue = issue_or_none
                if body.get("state") in ("open", "closed") and body["state"] != issue.state:
                    issue.state = body["state"]
                    issue.closed_at = now if issue.state == "closed" else None
                    default = "completed" if issue.state == "closed" else "reopened"
                    issue.state_reason = body.get("state_reason") or default
                issue.title = body.get("title", issue.title)
                issue.body = body.get("body", issue.body)
                issue.updated_at = now
            return Reply(200, issue_json(base, owner, issue))
        if method == "POST" and (m := COMMENTS.match(path)):
            found = self._find(m.group(2), int(m.group(3)))
            if found is None:
                return error_reply(404, "Not Found")
            if not isinstance(body.get("body"), str):
                return error_reply(422, "Validation Failed")
            with self._lock:
                found.comments.append(body["body"])
                found.updated_at = now
                self._next_id += 1
                comment_id = self._next_id
            return Reply(201, comment_json(base, owner, found, comment_id, body["body"], now))
        return None

    def _find(self, repo: str, number: int) -> FakeIssue | None:
        with self._lock:
            return next((i for i in self._issues.get(repo, []) if i.number == number), None)


def issue_json(base: str, owner: str, issue: FakeIssue) -> dict[str, Any]:
    full = f"{owner}/{issue.repo}"
    url = f"{base}/repos/{full}/issues/{issue.number}"
    return {
        "id": issue.id,
        "node_id": f"I_{issue.id}",
        "url": url,
        "repository_url": f"{base}/repos/{full}",
        "labels_url": f"{url}/labels{{/name}}",
        "comments_url": f"{url}/comments",
        "events_url": f"{url}/events",
        "html_url": f"https://github.com/{full}/issues/{issue.number}",
        "number": issue.number,
        "state": issue.state,
        "state_reason": issue.state_reason,
        "title": issue.title,
        "body": issue.body,
        "user": user_json(base, BOT_LOGIN, BOT_ID, "Bot"),
        "labels": [
            {
                "id": index + 1,
                "node_id": f"LA_{index + 1}",
                "url": f"{base}/repos/{full}/labels/{name}",
                "name": name,
                "color": "ededed",
                "default": False,
                "description": None,
            }
            for index, name in enumerate(issue.labels)
        ],
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "locked": False,
        "active_lock_reason": None,
        "comments": len(issue.comments),
        "closed_at": iso(issue.closed_at),
        "created_at": iso(issue.created_at),
        "updated_at": iso(issue.updated_at),
        "author_association": "NONE",
    }


def comment_json(  # noqa: PLR0917
    base: str, owner: str, issue: FakeIssue, comment_id: int, body: str, now: datetime
) -> dict[str, Any]:
    full = f"{owner}/{issue.repo}"
    return {
        "id": comment_id,
        "node_id": f"IC_{comment_id}",
        "url": f"{base}/repos/{full}/issues/comments/{comment_id}",
        "html_url": f"https://github.com/{full}/issues/{issue.number}#issuecomment-{comment_id}",
        "issue_url": f"{base}/repos/{full}/issues/{issue.number}",
        "body": body,
        "user": user_json(base, BOT_LOGIN, BOT_ID, "Bot"),
        "created_at": iso(now),
        "updated_at": iso(now),
        "author_association": "NONE",
    }
