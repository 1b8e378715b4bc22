"""The client reads GitHub's own examples of every answer it parses, skipping none.

Each ``examples`` entry of the description for the endpoints the client reads goes
through the parser of that endpoint item by item; then every example is served (an
``httpx.MockTransport`` answering each request with its operation's example) to a whole
``GitHubSource.observe``, for an organization and for a user account, and through the
GitHub App token exchange. The fake cannot hide a shape the client does not expect here:
these are GitHub's bytes, not ours.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from autoscaler.config import GitHubAppConfig, GitHubConfig
from autoscaler.domain import Observation
from autoscaler.observe.github.parse import (
    BadItem,
    parse_job,
    parse_repo,
    parse_run,
    parse_runner,
)
from autoscaler.observe.github.records import RunRef
from autoscaler.observe.github.source import GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics
from tests.conformance.openapi import Description
from tests.conformance.scenario import T0, private_key_pem

RUN = RunRef(30433642, "Hello-World", completed=False)
#: The API root's path, as on GitHub Enterprise Server (``https://HOST/api/v3``).
PREFIX = "/api/v3"
RUNS = "/repos/{owner}/{repo}/actions/runs"
JOBS = "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs"


@dataclass(frozen=True)
class Read:
    """An operation the client reads: where its items are and what parses one."""

    id: str
    template: str
    key: str | None  # the wrapper key of the items, None for a bare list
    parse: Callable[[Any], object]


READS = [
    Read("org-repos", "/orgs/{org}/repos", None, parse_repo),
    Read("user-repos", "/users/{username}/repos", None, parse_repo),
    Read("runs", RUNS, "workflow_runs", lambda item: parse_run(item, "Hello-World")),
    Read("jobs", JOBS, "jobs", lambda item: parse_job(item, RUN)),
    Read("org-runners", "/orgs/{org}/actions/runners", "runners", parse_runner),
    Read("repo-runners", "/repos/{owner}/{repo}/actions/runners", "runners", parse_runner),
]


@pytest.mark.parametrize("read", READS, ids=[r.id for r in READS])
def test_every_item_of_every_official_example_parses(description: Description, read: Read) -> None:
    examples = description.examples(read.template, "GET", 200)
    assert examples, f"the description has no example for {read.template}"
    for name, body in examples.items():
        items = body if read.key is None else body[read.key]
        assert items, f"example {name} of {read.template} lists nothing"
        for index, item in enumerate(items):
            try:
                parsed = read.parse(item)
            except BadItem as exc:
                pytest.fail(f"example {name} item {index} of {read.template}: {exc}")
            assert parsed is not None, f"example {name} item {index} was dropped"


def _serve_examples(
    description: Description, owner_kind: str, seen: list[httpx.Request]
) -> httpx.MockTransport:
    """Each request answered with the default example of its operation; a user owner's
    ``/orgs/`` paths with GitHub's 404. ``seen`` collects the requests."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        template = description.template(request.url.path.removeprefix(PREFIX))
        assert template is not None, request.url
        if owner_kind == "user" and template.startswith("/orgs/"):
            body = {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
            return httpx.Response(404, json=body)
        method = request.method
        status = min(s for s in description.statuses(template, method) if s < 300)
        example = description.examples(template, method, status)["default"]
        return httpx.Response(status, content=json.dumps(example).encode())

    return httpx.MockTransport(handle)


def _observe(
    description: Description, owner_kind: str, seen: list[httpx.Request], **config: Any
) -> Observation:
    cfg = GitHubConfig(owner="octo-org", api_url="https://github.example" + PREFIX, **config)
    source = GitHubSource(
        cfg,
        Metrics(),
        transport=_serve_examples(description, owner_kind, seen),
        wall_clock=lambda: 1.0e9,  # before the example token's expires_at (2016)
    )
    try:
        return source.observe(T0)
    finally:
        source.close()


@pytest.mark.parametrize("owner_kind", ["org", "user"])
def test_a_whole_observe_over_the_official_examples_skips_nothing(
    description: Description, owner_kind: str
) -> None:
    observation = _observe(description, owner_kind, [], token=Secret("t"))
    assert observation.skipped_items == 0
    jobs = description.examples(JOBS, "GET", 200)["default"]["jobs"]
    assert [job.id for job in observation.jobs] == [job["id"] for job in jobs]
    (job,) = observation.jobs
    assert job.labels == frozenset(label.lower() for label in jobs[0]["labels"])
    runners = description.examples(READS[4].template, "GET", 200)["default"]["runners"]
    seen = {(r.id, r.online, r.busy) for r in observation.runners}
    assert seen == {(r["id"], r["status"] == "online", r["busy"]) for r in runners}


def test_the_official_installation_token_example_authenticates(
    description: Description,
) -> None:
    """The App exchange reads ``token`` and ``expires_at`` from GitHub's own example."""
    app = GitHubAppConfig(app_id=1, installation_id=2, private_key=Secret(private_key_pem()))
    path = "/app/installations/{installation_id}/access_tokens"
    token = description.examples(path, "POST", 201)["default"]["token"]
    seen: list[httpx.Request] = []
    observation = _observe(description, "org", seen, app=app)
    assert observation.skipped_items == 0
    assert [r.url.path for r in seen if r.method == "POST"] == [
        PREFIX + "/app/installations/2/access_tokens"
    ]
    gets = [r for r in seen if r.method == "GET"]
    assert gets
    assert {r.headers["authorization"] for r in gets} == {f"Bearer {token}"}
