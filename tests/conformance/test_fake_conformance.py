"""The fake GitHub answers as GitHub's own OpenAPI description says GitHub answers.

Each endpoint the client calls and the fake serves is one line of ``CALLS``: the request,
the operation it is in the description (path template and method), and the status the
fake must answer in the realistic :mod:`scenario`. Each answer is checked:

- its status is one the operation documents, or in ``UNDOCUMENTED_STATUSES`` with why;
- its JSON body validates against that status's response schema (types, ``nullable``,
  enums, required properties, date-time formats); an error status the operation does not
  document is checked against GitHub's ``basic-error``; 204 and 304 have no body;
- the body has no property the schema does not name, but those ``UNDOCUMENTED_PROPERTIES``
  lists with why;
- the headers the description documents for it (``Link``, ``X-RateLimit-*``) have the
  documented types wherever the fake sends them.

Job retry's check-run annotations, job re-run and run re-run (``rerun-failed-jobs``) are
lines here too, and so are the org
webhook's delivery log and redelivery (``webhook.hook_id``); a later endpoint
(generate-jitconfig) is one more line
of ``CALLS``; a client request that no line covers fails
``test_every_request_the_client_makes_is_covered``.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from autoscaler.config import GitHubAppConfig, GitHubConfig
from autoscaler.fakes.github_reruns import fail_job, refuse_reruns
from autoscaler.fakes.github_webhooks import HOOK_ID
from autoscaler.observe.github.source import RUN_STATUSES, GitHubSource
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics
from tests.conformance.openapi import FORMATS, Description, errors
from tests.conformance.scenario import (
    APP_ID,
    CPU,
    INSTALLATION_ID,
    T0,
    TOKEN,
    Scenario,
    private_key_pem,
    scenario,
)

ORG_REPOS = "/orgs/{org}/repos"
RUNS = "/repos/{owner}/{repo}/actions/runs"
JOBS = "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs"
RUN = "/repos/{owner}/{repo}/actions/runs/{run_id}"
ORG_RUNNERS = "/orgs/{org}/actions/runners"
ORG_RUNNER = "/orgs/{org}/actions/runners/{runner_id}"
REPO_RUNNERS = "/repos/{owner}/{repo}/actions/runners"
REPO_RUNNER = "/repos/{owner}/{repo}/actions/runners/{runner_id}"
APP_TOKEN = "/app/installations/{installation_id}/access_tokens"
ANNOTATIONS = "/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations"
RERUN = "/repos/{owner}/{repo}/actions/jobs/{job_id}/rerun"
RERUN_FAILED = "/repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs"
HOOK_DELIVERIES = "/orgs/{org}/hooks/{hook_id}/deliveries"
HOOK_ATTEMPTS = "/orgs/{org}/hooks/{hook_id}/deliveries/{delivery_id}/attempts"
HOOK = "/orgs/{owner}/hooks/" + str(HOOK_ID)
#: Request prefixes in the scenario: the org (or user) and its runners, its repositories.
ORG, RUNNER, API, WEB, SITE = (
    "/orgs/{owner}",
    "/orgs/{owner}/actions/runners/",
    "/repos/{owner}/api",
    "/repos/{owner}/web",
    "/repos/{owner}/site",
)
TOKENS = "/app/installations/{installation}/access_tokens"
INSTALLATION_REPOS = "/installation/repositories"


@dataclass(frozen=True)
class Call:
    """One request to the fake, the documented operation it is, and the status expected.

    ``url`` may name the scenario's ids (``{owner}``, ``{mixed_run}``, ``{busy_runner}``);
    ``auth`` is ``token``, ``app-jwt`` (the App's own JWT), ``installation`` (an App
    installation token) or ``bad``; ``before`` prepares
    the fake: ``etag`` (the same GET first, then a conditional one), ``spent`` (the rate
    limit used up), ``secondary`` (a secondary rate limit with ``Retry-After``).
    """

    id: str
    method: str
    template: str
    url: str
    status: int
    owner: str = "org"
    auth: str = "token"
    before: str | None = None


CALLS = [
    Call("org-repos", "GET", ORG_REPOS, ORG + "/repos?per_page=100", 200),
    Call("org-repos-page", "GET", ORG_REPOS, ORG + "/repos?per_page=1&page=2", 200),
    Call("org-repos-304", "GET", ORG_REPOS, ORG + "/repos", 304, before="etag"),
    Call("user-repos", "GET", "/users/{username}/repos", "/users/{owner}/repos", 200, "user"),
    Call("app-repos", "GET", INSTALLATION_REPOS, INSTALLATION_REPOS, 200, auth="installation"),
    Call("app-repos-not-an-app", "GET", INSTALLATION_REPOS, INSTALLATION_REPOS, 403),
    Call("runs", "GET", RUNS, API + "/actions/runs", 200),
    Call("runs-queued", "GET", RUNS, API + "/actions/runs?status=queued", 200),
    Call("runs-in-progress", "GET", RUNS, API + "/actions/runs?status=in_progress", 200),
    Call("runs-waiting", "GET", RUNS, API + "/actions/runs?status=waiting", 200),
    Call("runs-created", "GET", RUNS, API + "/actions/runs?created=%3C%3D2030-01-01", 200),
    Call("runs-ghost", "GET", RUNS, WEB + "/actions/runs", 200),
    Call("runs-304", "GET", RUNS, API + "/actions/runs", 304, before="etag"),
    Call("runs-spent", "GET", RUNS, API + "/actions/runs", 403, before="spent"),
    Call("runs-secondary", "GET", RUNS, API + "/actions/runs", 429, before="secondary"),
    Call("jobs-mixed", "GET", JOBS, API + "/actions/runs/{mixed_run}/jobs?filter=latest", 200),
    Call("jobs-queued", "GET", JOBS, API + "/actions/runs/{queued_run}/jobs", 200),
    Call("jobs-finished", "GET", JOBS, API + "/actions/runs/{finished_run}/jobs", 200),
    Call("jobs-waiting", "GET", JOBS, API + "/actions/runs/{waiting_run}/jobs", 200),
    Call("jobs-ghost", "GET", JOBS, WEB + "/actions/runs/{ghost_run}/jobs", 200),
    Call("org-runners", "GET", ORG_RUNNERS, ORG + "/actions/runners", 200),
    Call("org-runners-bad-token", "GET", ORG_RUNNERS, ORG + "/actions/runners", 401, auth="bad"),
    Call("user-org-runners", "GET", ORG_RUNNERS, ORG + "/actions/runners", 404, "user"),
    Call("repo-runners", "GET", REPO_RUNNERS, WEB + "/actions/runners", 200),
    Call("user-repo-runners", "GET", REPO_RUNNERS, SITE + "/actions/runners", 200, "user"),
    Call("org-runners-named", "GET", ORG_RUNNERS, ORG + "/actions/runners?name=cpu-busy", 200),
    Call("org-runners-nobody", "GET", ORG_RUNNERS, ORG + "/actions/runners?name=nobody", 200),
    Call("repo-runners-named", "GET", REPO_RUNNERS, WEB + "/actions/runners?name=web-busy", 200),
    Call(
        "user-runners-named",
        "GET",
        REPO_RUNNERS,
        SITE + "/actions/runners?name=own-busy",
        200,
        "user",
    ),
    Call("org-delete", "DELETE", ORG_RUNNER, RUNNER + "{spare_runner}", 204),
    Call("org-delete-busy", "DELETE", ORG_RUNNER, RUNNER + "{busy_runner}", 422),
    Call("org-delete-gone", "DELETE", ORG_RUNNER, RUNNER + "999999", 404),
    Call("repo-delete", "DELETE", REPO_RUNNER, WEB + "/actions/runners/{repo_spare}", 204),
    Call("repo-delete-busy", "DELETE", REPO_RUNNER, WEB + "/actions/runners/{repo_busy}", 422),
    Call("repo-delete-gone", "DELETE", REPO_RUNNER, WEB + "/actions/runners/999999", 404),
    Call("user-delete", "DELETE", REPO_RUNNER, SITE + "/actions/runners/{repo_spare}", 204, "user"),
    Call("app-token", "POST", APP_TOKEN, TOKENS, 201, auth="app-jwt"),
    Call("app-token-bad-jwt", "POST", APP_TOKEN, TOKENS, 401, auth="bad"),
    Call("annotations", "GET", ANNOTATIONS, API + "/check-runs/{lost_job}/annotations", 200),
    Call(
        "annotations-page",
        "GET",
        ANNOTATIONS,
        API + "/check-runs/{lost_job}/annotations?per_page=50",
        200,
    ),
    Call("annotations-gone", "GET", ANNOTATIONS, API + "/check-runs/999999/annotations", 404),
    Call("rerun", "POST", RERUN, API + "/actions/jobs/{lost_job}/rerun", 201),
    Call(
        "rerun-no-permission",
        "POST",
        RERUN,
        API + "/actions/jobs/{lost_job}/rerun",
        403,
        before="rerun-403",
    ),
    Call(
        "rerun-refused",
        "POST",
        RERUN,
        API + "/actions/jobs/{lost_job}/rerun",
        422,
        before="rerun-422",
    ),
    Call("rerun-running", "POST", RERUN, API + "/actions/jobs/{mixed_job}/rerun", 403),
    Call(
        "rerun-failed",
        "POST",
        RERUN_FAILED,
        API + "/actions/runs/{lost_run}/rerun-failed-jobs",
        201,
    ),
    Call(
        "rerun-failed-no-permission",
        "POST",
        RERUN_FAILED,
        API + "/actions/runs/{lost_run}/rerun-failed-jobs",
        403,
        before="rerun-403",
    ),
    Call(
        "rerun-failed-refused",
        "POST",
        RERUN_FAILED,
        API + "/actions/runs/{lost_run}/rerun-failed-jobs",
        422,
        before="rerun-422",
    ),
    Call(
        "rerun-failed-running",
        "POST",
        RERUN_FAILED,
        API + "/actions/runs/{mixed_run}/rerun-failed-jobs",
        403,
    ),
    Call(
        "rerun-failed-gone",
        "POST",
        RERUN_FAILED,
        API + "/actions/runs/999999/rerun-failed-jobs",
        404,
    ),
    Call("run", "GET", RUN, API + "/actions/runs/{mixed_run}", 200),
    Call("run-finished", "GET", RUN, API + "/actions/runs/{finished_run}", 200),
    Call("run-gone", "GET", RUN, API + "/actions/runs/999999", 404),
    Call("hook-deliveries", "GET", HOOK_DELIVERIES, HOOK + "/deliveries?per_page=100", 200),
    Call(
        "hook-deliveries-page",
        "GET",
        HOOK_DELIVERIES,
        HOOK + "/deliveries?per_page=2&cursor={cursor}",
        200,
    ),
    Call(
        "hook-deliveries-failed", "GET", HOOK_DELIVERIES, HOOK + "/deliveries?status=failure", 200
    ),
    Call("hook-deliveries-304", "GET", HOOK_DELIVERIES, HOOK + "/deliveries", 304, before="etag"),
    Call("hook-deliveries-gone", "GET", HOOK_DELIVERIES, ORG + "/hooks/999/deliveries", 404),
    Call("hook-deliveries-bad-status", "GET", HOOK_DELIVERIES, HOOK + "/deliveries?status=x", 422),
    Call("hook-redeliver", "POST", HOOK_ATTEMPTS, HOOK + "/deliveries/{delivery}/attempts", 202),
    Call("hook-redeliver-gone", "POST", HOOK_ATTEMPTS, HOOK + "/deliveries/5/attempts", 404),
    Call("rate-limit", "GET", "/rate_limit", "/rate_limit", 200),
    Call("rate-limit-304", "GET", "/rate_limit", "/rate_limit", 304, before="etag"),
    Call("rate-limit-spent", "GET", "/rate_limit", "/rate_limit", 200, before="spent"),
]

_CONDITIONAL = (
    "GitHub answers 304 to any conditional GET whose ETag still matches (REST docs, "
    "'Use conditional requests'); the description lists 304 on a few operations only"
)
_PRIMARY = (
    "the primary rate limit, used up, answers 403 on any endpoint (REST docs, 'Rate limits "
    "for the REST API'); the description lists 403 per operation only for permissions"
)
_SECONDARY = (
    "a secondary rate limit answers 403 or 429, with or without Retry-After, on any "
    "endpoint (REST docs, 'Rate limits for the REST API'); not listed per operation"
)
_BAD_TOKEN = "a bad token answers 401 'Bad credentials' on any endpoint; listed on few"
_GONE = (
    "an unknown runner id answers 404 (as every unknown resource does); the description "
    "lists only 204 and 422 for the deletion"
)
_NOT_AN_ORG = "a user account has no /orgs/ endpoints: 404, like any unknown resource"

#: (method, template, status) the fake answers that the operation does not document.
UNDOCUMENTED_STATUSES = {
    ("GET", ORG_REPOS, 304): _CONDITIONAL,
    ("GET", RUNS, 304): _CONDITIONAL,
    ("GET", RUNS, 403): _PRIMARY,
    ("GET", RUNS, 429): _SECONDARY,
    ("GET", ORG_RUNNERS, 401): _BAD_TOKEN,
    ("GET", ORG_RUNNERS, 404): _NOT_AN_ORG,
    ("DELETE", ORG_RUNNER, 404): _GONE,
    ("DELETE", REPO_RUNNER, 404): _GONE,
    ("GET", ANNOTATIONS, 404): "an unknown check run answers 404, like any unknown resource",
    ("GET", RUN, 404): "an unknown workflow run answers 404, like any unknown resource",
    ("GET", HOOK_DELIVERIES, 304): _CONDITIONAL,
    ("GET", HOOK_DELIVERIES, 404): "an unknown hook answers 404, like any unknown resource",
    ("POST", HOOK_ATTEMPTS, 404): "an unknown delivery answers 404, like any unknown resource",
    ("POST", RERUN_FAILED, 403): (
        "GitHub answers a run re-run 403 without Actions: write ('Resource not accessible by "
        "integration') and for a run still in progress ('This workflow is already running'); "
        "the description lists only 201"
    ),
    ("POST", RERUN_FAILED, 404): "an unknown workflow run answers 404, like any unknown resource",
    ("POST", RERUN_FAILED, 422): (
        "a run re-run GitHub refuses as a request answers 422 with its generic error body; "
        "the description lists only 201"
    ),
    ("POST", RERUN, 422): (
        "a re-run GitHub refuses as a request (a job already re-run) answers 422 "
        "with its generic error body; the description lists only 201 and 403"
    ),
}

_ERROR_STATUS = (
    "GitHub's error bodies carry 'status' (the code as a string) since 2023; basic-error "
    "names it, validation-error-simple does not yet"
)
#: Call id -> JSON paths of properties the fake sends that the schema does not name.
UNDOCUMENTED_PROPERTIES: dict[str, dict[str, str]] = {
    "org-delete-busy": {"$.status": _ERROR_STATUS},
    "repo-delete-busy": {"$.status": _ERROR_STATUS},
    "hook-deliveries-bad-status": {"$.status": _ERROR_STATUS},
}


def _request(s: Scenario, call: Call, headers: dict[str, str] | None = None) -> httpx.Response:
    if call.auth == "installation":  # an installation token the App exchanged its JWT for
        s.fake.installation_tokens["ghs_conformance"] = s.fake.clock() + timedelta(hours=1)
    auth = {
        "token": f"Bearer {TOKEN}",
        "app-jwt": f"Bearer {s.app_jwt()}",
        "bad": "Bearer nope",
        "installation": "Bearer ghs_conformance",
    }
    sent = {"Authorization": auth[call.auth], **(headers or {})}
    url = s.fake.url + call.url.format(**s.ids)
    with httpx.Client(timeout=10) as client:
        return client.request(call.method, url, headers=sent)


def deliveries(s: Scenario) -> None:
    """The org hook, its delivery log with attempts: the listener is down (a loopback
    port nobody listens on), so each is "failed to connect", as GitHub logs one."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sender = s.fake.send_webhooks(f"http://127.0.0.1:{port}/github/webhook", b"conformance")
    for job_id in (s.ids["mixed_job"], s.ids["lost_job"], s.ids["mixed_job"]):
        sender.job_event(int(str(job_id)), "queued")
    assert sender.wait_idle(10)
    s.ids["delivery"] = sender.log[0].id
    s.ids["cursor"] = f"v1_{sender.log[0].id}"


def _prepare(s: Scenario, call: Call) -> dict[str, str]:
    """Put the fake in the call's state; the headers the call then sends."""
    if call.template in (HOOK_DELIVERIES, HOOK_ATTEMPTS):
        deliveries(s)
    if call.before == "etag":
        return {"If-None-Match": _request(s, call).headers["etag"]}
    if call.before == "spent":
        s.fake.RATE_LIMIT = 1  # one request left, then spend it
        _request(s, Call("spend", "GET", "", "/orgs/{owner}/repos", 200))
    if call.before in ("rerun-403", "rerun-422"):
        refuse_reruns(s.fake, int(call.before.removeprefix("rerun-")))
    if call.before == "secondary":
        s.fake.inject_fault(r"/actions/runs", 429, retry_after=30)
    return {}


def _body(response: httpx.Response) -> Any:
    return response.json() if response.content else None


@pytest.mark.parametrize("call", CALLS, ids=[c.id for c in CALLS])
def test_the_fake_answers_as_the_description_documents(
    description: Description, call: Call
) -> None:
    with scenario(call.owner) as s:
        try:
            response = _request(s, call, _prepare(s, call))
        finally:
            if s.fake.webhooks is not None:
                s.fake.webhooks.close()
    assert response.status_code == call.status, response.text[:300]
    key = (call.method, call.template, call.status)
    documented = call.status in description.statuses(call.template, call.method)
    assert documented or key in UNDOCUMENTED_STATUSES, f"{key} is not documented"

    if call.status in (204, 304):
        assert response.content == b""
        schema, validator = None, None
    elif documented:
        schema = description.body_schema(call.template, call.method, call.status)
        validator = description.validator(call.template, call.method, call.status)
    else:  # an error GitHub sends on any endpoint: its generic error body
        schema = {"$ref": "#/components/schemas/basic-error"}
        validator = Draft202012Validator(description.schema(schema), format_checker=FORMATS)
    if validator is not None:
        assert response.headers["content-type"].startswith("application/json")
        assert errors(validator, _body(response)) == []
        extra = set(description.undocumented(schema, _body(response)))
        assert extra == set(UNDOCUMENTED_PROPERTIES.get(call.id, {}))

    for name, header_schema in _header_schemas(description, call, documented).items():
        if name in response.headers:
            value = _typed(response.headers[name], header_schema)
            assert Draft202012Validator(header_schema).is_valid(value), (name, value)


def _header_schemas(
    description: Description, call: Call, documented: bool
) -> dict[str, dict[str, Any]]:
    """The call's documented headers, and the X-RateLimit-* of /rate_limit (sent on all)."""
    schemas = description.headers("/rate_limit", "GET", 200)
    if documented:
        schemas.update(description.headers(call.template, call.method, call.status))
    return schemas


def _typed(value: str, schema: dict[str, Any]) -> Any:
    if schema.get("type") == "integer":
        try:
            return int(value)
        except ValueError:
            return value
    return value


def test_every_tolerated_deviation_still_happens(description: Description) -> None:
    """A deviation listed but no longer made (or documented by now) must leave the list."""
    made = {(c.method, c.template, c.status) for c in CALLS}
    for method, template, status in UNDOCUMENTED_STATUSES:
        assert (method, template, status) in made
        assert status not in description.statuses(template, method)
    assert set(UNDOCUMENTED_PROPERTIES) <= {c.id for c in CALLS}


def test_a_partial_page_links_the_rest_as_documented(description: Description) -> None:
    """``Link`` is documented on the listings: rel="next" and "last" while pages remain."""
    assert "link" in description.headers(ORG_REPOS, "GET", 200)
    with scenario() as s, httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        first = client.get(f"{s.fake.url}/orgs/demo-org/repos?per_page=1")
        links = {
            rel: url for url, rel in re.findall(r'<([^>]+)>;\s*rel="(\w+)"', first.headers["link"])
        }
        second = client.get(links["next"])
    assert set(links) == {"next", "last"}
    assert links["last"].endswith("page=3")
    assert [r["name"] for r in first.json() + second.json()] == ["web", "docs"]


def test_a_runs_repository_is_the_listed_repository(description: Description) -> None:
    """The ``repository`` inside a run is the repository the listing shows."""
    with scenario() as s, httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        repos = client.get(f"{s.fake.url}/orgs/demo-org/repos").json()
        runs = client.get(f"{s.fake.url}/repos/demo-org/api/actions/runs").json()
    api = next(r for r in repos if r["name"] == "api")
    assert runs["workflow_runs"]
    for run in runs["workflow_runs"]:
        # A run embeds the required properties only, as GitHub's example shows.
        assert run["repository"] == {key: api[key] for key in run["repository"]}
        assert run["head_repository"] == run["repository"]


def test_run_statuses_are_the_documented_ones(description: Description) -> None:
    """``?status=`` accepts statuses and conclusions (``waiting``, ``requested`` too): the
    client asks only for documented ones, and the fake reports only documented ones."""
    accepted = set(description.parameter(RUNS, "GET", "status")["schema"]["enum"])
    assert {"waiting", "requested", "pending", "queued", "in_progress"} <= accepted
    assert set(RUN_STATUSES) <= accepted
    with scenario() as s, httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        reported = {
            run["status"]
            for repo in ("api", "web")
            for run in client.get(f"{s.fake.url}/repos/demo-org/{repo}/actions/runs").json()[
                "workflow_runs"
            ]
        }
    assert reported == {"queued", "in_progress", "completed", "waiting"}
    assert reported <= accepted
    jobs_filter = description.parameter(JOBS, "GET", "filter")["schema"]["enum"]
    assert "latest" in jobs_filter


#: id, repository, ?status=, the run (a scenario id) GitHub's listing then includes.
STATUS_FILTERS = [
    ("waiting-run", "api", "waiting", "waiting_run"),
    ("reported-completed", "web", "completed", "ghost_run"),
    ("conclusion", "api", "success", "finished_run"),
]


@pytest.mark.parametrize(
    ("repo", "status", "run"), [f[1:] for f in STATUS_FILTERS], ids=[f[0] for f in STATUS_FILTERS]
)
def test_the_status_filter_matches_the_reported_status_or_the_conclusion(
    description: Description, repo: str, status: str, run: str
) -> None:
    """The parameter's description: "Returns workflow runs with the check run ``status`` or
    ``conclusion`` that you specify"; a run filtered on is one the listing reports so."""
    assert "conclusion" in description.parameter(RUNS, "GET", "status")["description"]
    with scenario() as s, httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        url = f"{s.fake.url}/repos/demo-org/{repo}/actions/runs?status={status}"
        listed = client.get(url).json()["workflow_runs"]
    assert s.ids[run] in [r["id"] for r in listed]
    assert all(status in (r["status"], r["conclusion"]) for r in listed)


@pytest.mark.parametrize("owner_kind", ["org", "user"])
def test_every_request_the_client_makes_is_covered(
    description: Description, owner_kind: str
) -> None:
    """The client's requests (an App's, a whole observe, a runner removal, a runner looked
    up by name before an orphan goes) are all in CALLS."""
    with scenario(owner_kind) as s:
        config = GitHubConfig(
            owner=str(s.ids["owner"]),
            api_url=s.fake.url,
            app=GitHubAppConfig(
                app_id=APP_ID,
                installation_id=INSTALLATION_ID,
                private_key=Secret(private_key_pem()),
            ),
        )
        source = GitHubSource(config, Metrics(), wall_clock=T0.timestamp)
        try:
            observation = source.observe(T0)
            source.observe(T0)  # the second tick is conditional: 304s
            spare = s.ids.get("spare_runner", s.ids["repo_spare"])
            source.remove_runner(int(str(spare)))
            source.find_runner("cpu-busy" if owner_kind == "org" else "own-busy")
            # job retry: a run seen running, then failed; its jobs, annotations, the run
            # read whole, its failed jobs re-run
            repo = "api" if owner_kind == "org" else "site"
            runner = s.fake.register_runner("ci-i-0abc123def4567890", CPU, repo=repo)
            lost = s.fake.queue_job(repo, CPU, name="lost")
            s.fake.assign_job(lost, runner)
            source.observe(T0 + timedelta(minutes=1))
            fail_job(s.fake, lost)
            source.observe(T0 + timedelta(minutes=2))
            (run,) = source.completed_runs(T0)
            assert [j.job_id for j in run.jobs] == [lost]
            assert source.read_run(repo, run.run_id) == run  # what a webhook makes it read
            source.rerun_failed_jobs(repo, run.run_id)
            source.run_progress(repo, run.run_id)  # what a 403 makes it read
            if owner_kind == "org":  # webhook.hook_id: the delivery log, a redelivery
                deliveries(s)
                log = source.delivery_log(HOOK_ID)
                read = log.read(T0.timestamp() - 3600)
                assert read.complete and read.attempts
                log.redeliver(read.attempts[0].id)
        finally:
            source.close()
            if s.fake.webhooks is not None:
                s.fake.webhooks.close()
        requests = [(r.method, r.path) for r in s.fake.requests]
    assert observation.jobs and observation.runners
    called = {(method, description.template(path)) for method, path in requests}
    assert None not in {t for _, t in called}, f"a request outside the description: {requests}"
    assert called <= {(c.method, c.template) for c in CALLS}


@pytest.mark.parametrize(
    ("owner_kind", "template", "url", "name"),
    [
        pytest.param("org", ORG_RUNNERS, ORG + "/actions/runners", "cpu-busy", id="org"),
        pytest.param("org", REPO_RUNNERS, WEB + "/actions/runners", "web-busy", id="repo"),
        pytest.param("user", REPO_RUNNERS, SITE + "/actions/runners", "own-busy", id="user"),
    ],
)
def test_the_runner_listings_filter_on_the_documented_name(
    description: Description, owner_kind: str, template: str, url: str, name: str
) -> None:
    """Both runner listings document ``name`` ("The name of a self-hosted runner"); the
    orphan check asks with it, so the fake answers only the runner of that name."""
    parameter = description.parameter(template, "GET", "name")
    assert (
        parameter["in"] == "query" and "name of a self-hosted runner" in (parameter["description"])
    )
    with scenario(owner_kind) as s, httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        base = s.fake.url + url.format(**s.ids)
        named = c.get(base, params={"name": name}).json()
        everyone = c.get(base).json()
    assert [r["name"] for r in named["runners"]] == [name] and named["total_count"] == 1
    assert everyone["total_count"] > 1
