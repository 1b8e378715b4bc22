"""Registering runners at GitHub: the two credentials the controller hands to instances.

``generate-jitconfig`` creates an ephemeral runner and its single-use config;
``registration-token`` creates a one-hour token that can only register runners.

``POST /orgs/{org}/actions/runners/generate-jitconfig`` (an organization), or
``POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig`` (a user owner, whose
runners belong to a repository), with ``{"name", "runner_group_id", "labels",
"work_folder"}``. GitHub answers 201 with ``{"runner": {...}, "encoded_jit_config"}``:
the runner exists at once, offline until a machine runs ``run.sh --jitconfig`` with the
config; the config works once.

Errors are translated by :class:`~autoscaler.observe.github.http.GitHubHttp` from the
status, never the message: 409 (the name is taken) -> ConflictError, 422 (labels or
runner group refused) -> RejectedError, 403 (the credentials lack "Self-hosted runners:
write") -> AuthenticationError, 403/429 rate limits -> RateLimitedError, 5xx and timeouts
-> TransientError. The config never reaches a log line, a metric or an exception.

``POST /orgs/{org}/actions/runners/registration-token`` (or the repository's, for a user
owner) answers 201 with ``{"token", "expires_at"}``: a machine running ``config.sh
--token`` with it registers a runner of its own, until it expires (an hour). The same
errors apply; the token is a :class:`Secret` like the config.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from autoscaler.errors import TransientError
from autoscaler.observe.github.http import GitHubHttp
from autoscaler.observe.github.parse import (
    JitConfigAnswer,
    PayloadError,
    RegistrationTokenAnswer,
    read,
)
from autoscaler.ports import JitRunner, RegistrationToken
from autoscaler.secrets import Secret


def generate_jit_config(  # noqa: PLR0917 (GitHub's request, field by field)
    http: GitHubHttp,
    path: str,
    name: str,
    labels: Sequence[str],
    runner_group_id: int,
    work_folder: str,
) -> JitRunner:
    """POST ``path`` (the org's or a repository's generate-jitconfig URL)."""
    body = json.dumps(
        {
            "name": name,
            "runner_group_id": int(runner_group_id),
            "labels": list(labels),
            "work_folder": work_folder,
        }
    ).encode()
    answer = http.send("POST", path, "runner_jitconfig", body=body)
    try:
        data = read(JitConfigAnswer, answer.content)
    except PayloadError:
        # The runner may exist now: a transient error keeps the controller's intent, and
        # its next tick resolves the name (409) instead of asking blindly.
        raise TransientError(f"GitHub POST {path}: the answer has no runner id or config") from None
    return JitRunner(data.runner.id, Secret(data.encoded_jit_config))


def create_registration_token(http: GitHubHttp, path: str) -> RegistrationToken:
    """POST ``path`` (the org's or a repository's registration-token URL)."""
    answer = http.send("POST", path, "runner_registration_token", body=b"")
    try:
        data = read(RegistrationTokenAnswer, answer.content)
    except PayloadError:
        raise TransientError(f"GitHub POST {path}: the answer has no token or expiry") from None
    return RegistrationToken(Secret(data.token), data.expires_at)
