"""The fake GitHub's runner registration, as GitHub documents it: just-in-time configs and
registration tokens.

``POST /orgs/{org}/actions/runners/generate-jitconfig`` and
``POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig`` with ``{"name",
"runner_group_id", "labels", "work_folder"}`` (all but ``work_folder`` required; 1 to 100
labels): ``201`` with ``{"runner", "encoded_jit_config"}``. The runner exists at once and
is listed ``offline`` (``ephemeral: true``) until a machine connects with the config
(:meth:`JitRegistry.connect`); a config works once. ``409`` when a runner of that name
exists, ``422`` for a body GitHub would refuse (missing fields, bad labels, a runner group
that does not exist), ``404`` for an org path on a user owner, ``403`` when the
credentials lack "Self-hosted runners: write" (:attr:`JitRegistry.forbidden`).

``POST /orgs/{org}/actions/runners/registration-token`` and
``POST /repos/{owner}/{repo}/actions/runners/registration-token``: ``201`` with ``{"token",
"expires_at"}``, an hour from now on the fake's clock. A machine running ``config.sh``
with the token registers a runner of its choosing (:meth:`GitHubState.register_with_token`)
until the token expires; the same 403 switch applies.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from autoscaler.fakes.github_shapes import Reply, error_reply, iso, runner_json

if TYPE_CHECKING:
    from autoscaler.fakes.github_state import GitHubState

ORG_JIT = re.compile(r"^/orgs/([^/]+)/actions/runners/generate-jitconfig$")
REPO_JIT = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runners/generate-jitconfig$")
ORG_TOKEN = re.compile(r"^/orgs/([^/]+)/actions/runners/registration-token$")
REPO_TOKEN = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runners/registration-token$")
#: How long a registration token works, as GitHub documents it.
TOKEN_LIFETIME = timedelta(hours=1)
MAX_LABELS = 100
_FORBIDDEN = "Resource not accessible by integration"


class JitRegistry:
    """JIT configs issued and not yet used, registration tokens and their expiry, the
    runner groups that exist, the 403 switch."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: encoded config -> runner id, while unused.
        self.unused: dict[str, int] = {}
        #: Runner group ids that exist (1 is "Default").
        self.groups: set[int] = {1}
        #: True: the credentials lack "Self-hosted runners: write" (403).
        self.forbidden = False
        #: Configs issued, ever (a test counts them, or looks for them in logs).
        self.issued = 0
        self.configs: list[str] = []
        #: Registration token -> (expiry, the repository it registers at; None: the org).
        self.tokens: dict[str, tuple[datetime, str | None]] = {}

    def issue(self, runner_id: int) -> str:
        with self.lock:
            payload = {"runner_id": runner_id, "nonce": secrets.token_hex(8)}
            encoded = base64.b64encode(json.dumps(payload).encode()).decode()
            self.unused[encoded] = runner_id
            self.issued += 1
            self.configs.append(encoded)
            return encoded

    def issue_token(self, now: datetime, repo: str | None) -> tuple[str, datetime]:
        with self.lock:
            token = secrets.token_hex(15).upper()
            expires = now + TOKEN_LIFETIME
            self.tokens[token] = (expires, repo)
            return token, expires

    def check_token(self, token: str, now: datetime) -> str | None:
        """The repository a valid token registers at (None: the org); ValueError when it
        was never issued or has expired."""
        with self.lock:
            found = self.tokens.get(token)
        if found is None or now >= found[0]:
            raise ValueError("this registration token expired, or was never issued")
        return found[1]

    def take(self, encoded: str) -> int:
        """The runner a config registers; ValueError when it was used or never issued."""
        with self.lock:
            runner_id = self.unused.pop(encoded, None)
        if runner_id is None:
            raise ValueError("this JIT config was used already, or never issued")
        return runner_id


def _problem(body: Any, groups: set[int]) -> str | None:
    """What GitHub's validation would refuse in ``body`` (None: acceptable)."""
    if not isinstance(body, dict):
        return "Invalid request. Body must be a JSON object."
    name, group, labels = body.get("name"), body.get("runner_group_id"), body.get("labels")
    if not isinstance(name, str) or not name:
        return 'Invalid request. "name" is a required string.'
    if isinstance(group, bool) or not isinstance(group, int):
        return 'Invalid request. "runner_group_id" is a required integer.'
    if (
        not isinstance(labels, list)
        or not 1 <= len(labels) <= MAX_LABELS
        or not all(isinstance(x, str) and x.strip() and "," not in x for x in labels)
    ):
        return 'Invalid request. "labels" must be 1 to 100 label names.'
    if "work_folder" in body and not isinstance(body["work_folder"], str):
        return 'Invalid request. "work_folder" must be a string.'
    if group not in groups:
        return f"Runner group {group} does not exist."
    return None


def generate(fake: GitHubState, repo: str | None, raw: bytes, headers: dict[str, str]) -> Reply:
    """Answer one generate-jitconfig (the owner was checked by the caller)."""
    registry = fake.jit
    if registry.forbidden:
        return error_reply(403, _FORBIDDEN, headers)
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        return error_reply(400, "Problems parsing JSON", headers)
    problem = _problem(body, registry.groups)
    if problem is not None:
        return error_reply(422, problem, headers)
    name = body["name"]
    with fake.lock:
        if any(r.name == name for r in fake.runners()):
            return error_reply(
                409, f"Already exists - A runner with the name {name} already exists.", headers
            )
        runner_id = fake.register_runner(name, body["labels"], repo)
        runner = fake._runners[runner_id]
        runner.online, runner.ephemeral = False, True
        encoded = registry.issue(runner_id)
        return Reply(201, {"runner": runner_json(runner), "encoded_jit_config": encoded}, headers)


def registration_token(fake: GitHubState, repo: str | None, headers: dict[str, str]) -> Reply:
    """Answer one registration-token request (the owner was checked by the caller)."""
    registry = fake.jit
    if registry.forbidden:
        return error_reply(403, _FORBIDDEN, headers)
    token, expires = registry.issue_token(fake.clock(), repo)
    return Reply(201, {"token": token, "expires_at": iso(expires)}, headers)
