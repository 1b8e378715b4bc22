"""The fake GitHub's runner registration, as GitHub documents it: just-in-time configs and
registration tokens.

``POST /orgs/{org}/actions/runners/generate-jitconfig`` and
``POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig`` with ``{"name",
"runner_group_id", "labels", "work_folder"}`` (all but ``work_folder`` required; 1 to 100
labels): ``201`` with ``{"runner", "encoded_jit_config"}``. The runner exists at once and
is listed ``offline`` (``ephemeral: true``) until a machine connects with the config; a
config works once (the configs issued are the state's ``JitRegistry``). ``409`` when a
runner of that name exists, ``422`` for a body GitHub would refuse (missing fields, bad
labels, a runner group that does not exist), ``404`` for an org path on a user owner,
``403`` when the credentials lack "Self-hosted runners: write" (``JitRegistry.forbidden``).

``POST /orgs/{org}/actions/runners/registration-token`` and
``POST /repos/{owner}/{repo}/actions/runners/registration-token``: ``201`` with ``{"token",
"expires_at"}``, an hour from now on the fake's clock (the tokens issued are the
``JitRegistry``'s too). A machine running ``config.sh`` with the token registers a runner
of its choosing (``GitHubState.register_with_token``) until the token expires; the same
403 switch applies.
"""

from __future__ import annotations

import json
import re
from typing import Any

from autoscaler.fakes.github_shapes import Reply, error_reply, iso, runner_json
from autoscaler.fakes.github_state import GitHubState

ORG_JIT = re.compile(r"^/orgs/([^/]+)/actions/runners/generate-jitconfig$")
REPO_JIT = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runners/generate-jitconfig$")
ORG_TOKEN = re.compile(r"^/orgs/([^/]+)/actions/runners/registration-token$")
REPO_TOKEN = re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runners/registration-token$")
MAX_LABELS = 100
_FORBIDDEN = "Resource not accessible by integration"


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
