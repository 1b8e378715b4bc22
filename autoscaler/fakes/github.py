"""A fake GitHub: a real HTTP server on 127.0.0.1 speaking the REST shapes the adapter uses.

Endpoints: ``GET /orgs/{org}/repos``, ``/users/{owner}/repos`` (public repositories only)
and ``/installation/repositories`` (an App installation token's),
``GET /repos/{o}/{r}/actions/runs?status=&created=``, ``GET /repos/{o}/{r}/actions/runs/{id}/jobs``,
``GET /orgs/{org}/actions/runners``, ``DELETE /orgs/{org}/actions/runners/{id}``,
``GET /repos/{o}/{r}/actions/runners``, ``DELETE /repos/{o}/{r}/actions/runners/{id}``
(both runner listings filter on the documented ``?name=``), ``GET /rate_limit`` (free,
answered even when the budget is spent), ``POST /app/installations/{id}/access_tokens``,
and the issue endpoints the ``github_issue`` receiver uses
(:mod:`autoscaler.fakes.github_issues`: create, list, update, comment), the org webhook's
delivery log and redelivery (:mod:`autoscaler.fakes.github_deliveries`), failed jobs with
their check-run annotations and re-runs (:mod:`autoscaler.fakes.github_reruns`:
``GET /repos/{o}/{r}/check-runs/{id}/annotations``, ``POST
/repos/{o}/{r}/actions/jobs/{id}/rerun`` and ``POST
/repos/{o}/{r}/actions/runs/{id}/rerun-failed-jobs``, a new run attempt per re-run). An
``owner_kind="user"`` owner is a user account: every ``/orgs/{owner}/...`` path answers
404 and runners live on repositories.
Behaviour as GitHub documents it: ``Link`` pagination (``per_page`` max 100, default 30),
an ``ETag`` on every GET and ``304`` on a matching ``If-None-Match`` (a 304 costs no rate
limit), ``x-ratelimit-*`` headers, a ``Date`` header on the fake's clock, 401 with
GitHub's JSON body on a bad token; runs filtered on the status they report or their
conclusion, status-filtered listings capped at 1,000 runs (``total_count`` counts all),
``created`` ranges, running jobs whose steps move on with the clock; injectable faults
(primary and secondary rate limits, 5xx), latency and malformed or raw bodies
(:mod:`autoscaler.fakes.github_listing` says how listings are filtered). Every body
validates against GitHub's OpenAPI description (``tests/conformance`` checks it).

What it does not model (a test that needs one of these must add it, docs first):

- one workflow (``CI``, id 1) per repository, run by pushes to ``main``: no pull requests,
  no ``needs`` (a re-run brings back no dependents), no re-run of a whole run (``POST
  .../runs/{id}/rerun``), a completed run concludes ``success`` unless
  :meth:`set_run_status` says otherwise; a run's status derives from its jobs unless
  :meth:`set_run_status` forces one;
- the run filters other than ``status`` and ``created`` (``branch``, ``event``...) are
  ignored;
- repositories have no description, topics, counts or history;
- runners have no versions; runner groups are ids only (``jit.groups``, for
  generate-jitconfig's 422); one App installation with fixed permissions;
- the rate limit meters ``core`` only (secondary limits only when injected);
- webhooks are ``workflow_job`` only (:meth:`send_webhooks`,
  :mod:`autoscaler.fakes.github_webhooks`), to one URL, never retried (but redelivered
  when asked through the delivery log), with no
  ``installation`` object and no ``deployment`` for jobs an environment holds.

Thread-safe: the emulator drives the state while the server answers requests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from autoscaler.fakes.github_records import FakeJob, FakeRequest, FakeRun, FakeRunner
from autoscaler.fakes.github_server import FakeServer, make_server
from autoscaler.fakes.github_state import GitHubState
from autoscaler.fakes.github_webhooks import Faults, WebhookSender

__all__ = ["FakeGitHub", "FakeJob", "FakeRequest", "FakeRun", "FakeRunner"]


class FakeGitHub(GitHubState):
    """The fake's state plus a real HTTP server on 127.0.0.1 (``start``/``stop``)."""

    def __init__(
        self,
        owner: str = "demo-org",
        token: str = "fake-token",  # noqa: S107 - the fake's own token, not a secret
        *,
        clock: Callable[[], datetime] | None = None,
        app_id: int | None = None,
        app_public_key_pem: str | None = None,
        latency: float = 0.0,
        owner_kind: str = "org",
    ) -> None:
        super().__init__(
            owner,
            token,
            clock=clock,
            app_id=app_id,
            app_public_key_pem=app_public_key_pem,
            latency=latency,
            owner_kind=owner_kind,
        )
        self._server: FakeServer | None = None
        self._thread: threading.Thread | None = None
        #: The sender of :meth:`send_webhooks` (the state knows it only as a sink).
        self.webhooks: WebhookSender | None = None

    def start(self) -> str:
        self._server = make_server(self)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-github",
            daemon=True,
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def send_webhooks(
        self, url: str, secret: bytes, *, faults: Faults | None = None
    ) -> WebhookSender:
        """Deliver every job's ``workflow_job`` events from now on, signed, to ``url``
        (:mod:`autoscaler.fakes.github_webhooks`; ``faults`` drop, duplicate, reorder)."""
        sender = WebhookSender(self, url, secret, faults=faults)
        self.webhooks = sender
        return sender

    def __enter__(self) -> FakeGitHub:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
