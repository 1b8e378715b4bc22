"""The fake GitHub's runner registration (generate-jitconfig for ephemeral runners,
registration-token for persistent ones) answers as GitHub's OpenAPI description documents:
status, body schema, no undocumented property. One request per row, in order, on one fake
(the 409 row asks for the name the first row took). Same checks as
``test_fake_conformance`` for the client's endpoints."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from autoscaler.fakes.github import FakeGitHub
from tests.conformance.openapi import Description, errors

ORG_JIT = "/orgs/{org}/actions/runners/generate-jitconfig"
REPO_JIT = "/repos/{owner}/{repo}/actions/runners/generate-jitconfig"
ORG_TOKEN = "/orgs/{org}/actions/runners/registration-token"
REPO_TOKEN = "/repos/{owner}/{repo}/actions/runners/registration-token"
GOOD = {"name": "gpu-i-0abc", "runner_group_id": 1, "labels": ["gpu"], "work_folder": "_work"}

#: id, template, path, JSON body, expected status
ROWS: list[tuple[str, str, str, Any, int]] = [
    ("org-created", ORG_JIT, "/orgs/o/actions/runners/generate-jitconfig", GOOD, 201),
    ("org-name-taken", ORG_JIT, "/orgs/o/actions/runners/generate-jitconfig", GOOD, 409),
    (
        "org-no-labels",
        ORG_JIT,
        "/orgs/o/actions/runners/generate-jitconfig",
        {**GOOD, "name": "x", "labels": []},
        422,
    ),
    (
        "org-unknown-group",
        ORG_JIT,
        "/orgs/o/actions/runners/generate-jitconfig",
        {**GOOD, "name": "y", "runner_group_id": 42},
        422,
    ),
    (
        "repo-created",
        REPO_JIT,
        "/repos/o/app/actions/runners/generate-jitconfig",
        {**GOOD, "name": "repo-i-0abc"},
        201,
    ),
    (
        "repo-unknown",
        REPO_JIT,
        "/repos/o/nope/actions/runners/generate-jitconfig",
        {**GOOD, "name": "z"},
        404,
    ),
    ("org-token", ORG_TOKEN, "/orgs/o/actions/runners/registration-token", None, 201),
    ("repo-token", REPO_TOKEN, "/repos/o/app/actions/runners/registration-token", None, 201),
]
_ERROR_STATUS = (
    "GitHub's error bodies carry 'status' (the code as a string) since 2023; basic-error "
    "names it, validation-error-simple does not yet"
)
UNDOCUMENTED_PROPERTIES = {
    "org-no-labels": {"$.status": _ERROR_STATUS},
    "org-unknown-group": {"$.status": _ERROR_STATUS},
}


@pytest.fixture(scope="module")
def answers() -> Iterator[dict[str, httpx.Response]]:
    with FakeGitHub(owner="o", token="t") as fake, httpx.Client(timeout=10) as client:
        fake.add_repo("app")
        out = {}
        for row_id, _, path, body, _ in ROWS:
            out[row_id] = client.post(
                f"{fake.url}{path}", json=body, headers={"Authorization": "Bearer t"}
            )
        yield out


@pytest.mark.parametrize(
    ("row_id", "template", "status"),
    [(r[0], r[1], r[4]) for r in ROWS],
    ids=[r[0] for r in ROWS],
)
def test_runner_registration_answers_as_documented(
    description: Description,
    answers: dict[str, httpx.Response],
    row_id: str,
    template: str,
    status: int,
) -> None:
    response = answers[row_id]
    assert response.status_code == status, response.text[:300]
    assert status in description.statuses(template, "POST")
    body = response.json()
    assert errors(description.validator(template, "POST", status), body) == []
    schema = description.body_schema(template, "POST", status)
    extra = set(description.undocumented(schema, body))
    assert extra == set(UNDOCUMENTED_PROPERTIES.get(row_id, {}))


def test_the_created_runner_is_offline_and_ephemeral(answers: dict[str, httpx.Response]) -> None:
    runner = answers["org-created"].json()["runner"]
    assert (runner["status"], runner["busy"], runner["ephemeral"]) == ("offline", False, True)


def test_a_registration_token_lasts_an_hour(answers: dict[str, httpx.Response]) -> None:
    from datetime import datetime, timedelta  # noqa: PLC0415

    body = answers["org-token"].json()
    expires = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    left = expires - datetime.now(expires.tzinfo)
    assert timedelta(minutes=59) < left <= timedelta(hours=1)
