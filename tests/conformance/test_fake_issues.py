"""The fake GitHub's issue endpoints (what the ``github_issue`` alert receiver calls) answer
as GitHub's OpenAPI description documents: status, body schema, no undocumented property.

One request per row, in order, on one fake (the later rows act on the issue the first
opened). Same checks as ``test_fake_conformance`` for the client's endpoints.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from autoscaler.fakes.github import FakeGitHub
from tests.conformance.openapi import Description, errors

ISSUES = "/repos/{owner}/{repo}/issues"
ISSUE = "/repos/{owner}/{repo}/issues/{issue_number}"
COMMENTS = "/repos/{owner}/{repo}/issues/{issue_number}/comments"

#: id, method, template, path under /repos/o/alerts, JSON body, expected status
ROWS: list[tuple[str, str, str, str, Any, int]] = [
    ("create", "POST", ISSUES, "/issues", {"title": "[P2] x", "body": "b", "labels": ["t"]}, 201),
    ("list-open-labelled", "GET", ISSUES, "/issues?state=open&labels=t&per_page=100", None, 200),
    ("comment", "POST", COMMENTS, "/issues/1/comments", {"body": "still firing"}, 201),
    ("close", "PATCH", ISSUE, "/issues/1", {"state": "closed", "state_reason": "completed"}, 200),
    ("list-closed", "GET", ISSUES, "/issues?state=closed", None, 200),
    ("create-untitled", "POST", ISSUES, "/issues", {"body": "no title"}, 422),
    ("comment-unknown", "POST", COMMENTS, "/issues/99/comments", {"body": "x"}, 404),
]
_ERROR_STATUS = (
    "GitHub's error bodies carry 'status' (the code as a string) since 2023; basic-error "
    "names it, validation-error does not yet"
)
UNDOCUMENTED_PROPERTIES = {"create-untitled": {"$.status": _ERROR_STATUS}}


@pytest.fixture(scope="module")
def answers() -> Iterator[dict[str, httpx.Response]]:
    with FakeGitHub(owner="o", token="t") as fake, httpx.Client(timeout=10) as client:
        fake.add_repo("alerts")
        out = {}
        for row_id, method, _, path, body, _ in ROWS:
            out[row_id] = client.request(
                method,
                f"{fake.url}/repos/o/alerts{path}",
                json=body,
                headers={"Authorization": "Bearer t"},
            )
        yield out


@pytest.mark.parametrize(
    ("row_id", "method", "template", "status"),
    [(r[0], r[1], r[2], r[5]) for r in ROWS],
    ids=[r[0] for r in ROWS],
)
def test_the_fake_issue_endpoints_answer_as_documented(
    description: Description,
    answers: dict[str, httpx.Response],
    row_id: str,
    method: str,
    template: str,
    status: int,
) -> None:
    response = answers[row_id]
    assert response.status_code == status, response.text[:300]
    assert status in description.statuses(template, method)
    body = response.json()
    assert errors(description.validator(template, method, status), body) == []
    schema = description.body_schema(template, method, status)
    extra = set(description.undocumented(schema, body))
    assert extra == set(UNDOCUMENTED_PROPERTIES.get(row_id, {}))


def test_the_listing_filters_by_state_and_labels(answers: dict[str, httpx.Response]) -> None:
    assert [i["number"] for i in answers["list-open-labelled"].json()] == [1]
    [closed] = answers["list-closed"].json()
    assert (closed["state"], closed["state_reason"], closed["comments"]) == (
        "closed",
        "completed",
        1,
    )
