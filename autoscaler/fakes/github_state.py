"""The fake GitHub's state, without its HTTP server (:mod:`autoscaler.fakes.github_server`
serves it; :mod:`autoscaler.fakes.github` puts the two together).

Thread-safe: the emulator drives the state while the server answers requests.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from autoscaler.fakes.github_issues import FakeIssue, IssueTracker
from autoscaler.fakes.github_records import (
    FakeJob,
    FakeRepo,
    FakeRequest,
    FakeRun,
    FakeRunner,
    Fault,
)

__all__ = ["GitHubState", "JitRegistry", "JobEventSink"]


#: Job statuses a job can be created in (``waiting``: an environment approval).
_WAITING_STATUSES = frozenset({"queued", "waiting", "pending", "requested"})
#: Run statuses and conclusions GitHub documents for ``?status=`` (the OpenAPI enum).
RUN_STATUSES = frozenset({"queued", "in_progress", "completed", "waiting", "requested", "pending"})
RUN_CONCLUSIONS = frozenset(
    {
        "action_required",
        "cancelled",
        "failure",
        "neutral",
        "skipped",
        "stale",
        "success",
        "timed_out",
    }
)


#: How long a registration token works, as GitHub documents it.
TOKEN_LIFETIME = timedelta(hours=1)


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


class JobEventSink(Protocol):
    """Where ``workflow_job`` events go (the fake's webhook sender)."""

    def job_event(self, job_id: int, action: str) -> None: ...


class GitHubState:
    """The fake's state: repositories, runs, jobs, runners, tokens, faults, the rate limit.

    Times are timezone-aware UTC from ``clock``. :class:`FakeGitHub` adds the server.
    """

    RATE_LIMIT = 5000
    #: A listing of runs filtered by ``status`` (or ``created``, ``branch``, ...) returns
    #: at most this many runs, as GitHub documents; ``total_count`` still counts them all.
    RUN_LISTING_CAP = 1000

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
        if owner_kind not in {"org", "user"}:
            raise ValueError(f"owner_kind must be 'org' or 'user', not {owner_kind!r}")
        self.owner = owner
        #: "org" (an organization) or "user" (a user account: no /orgs/ endpoints).
        self.owner_kind = owner_kind
        self.token = token
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.app_id = app_id
        self.app_public_key_pem = app_public_key_pem
        self.latency = latency
        self.url = ""
        self.requests: list[FakeRequest] = []
        #: Installation tokens issued to the App: token -> expiry.
        self.installation_tokens: dict[str, datetime] = {}
        self.lock = threading.RLock()
        self._repos: dict[str, FakeRepo] = {}
        self._runs: dict[int, FakeRun] = {}
        #: Run ids per repository (the runs listing must not scan every run of the org).
        self._runs_by_repo: dict[str, list[int]] = {}
        self._jobs: dict[int, FakeJob] = {}
        self._runners: dict[int, FakeRunner] = {}
        self._faults: list[Fault] = []
        #: Issues per repository (the github_issue alert receiver's endpoints).
        self.issue_tracker = IssueTracker()
        self._jit: JitRegistry | None = None
        #: Called with (method, path with query, status) once a reply is decided and its
        #: effect applied, before it is sent: a test can act at the moment the fake has
        #: done the work and the client has not heard back (kill the client, say). A true
        #: return drops the connection unanswered: the response is lost.
        self.before_reply: Callable[[str, str, int], bool | None] | None = None
        #: Called with (method, path with query) before the fake handles a request: a test
        #: can hold one client's request there until the world is as the story needs.
        self.before_request: Callable[[str, str], None] | None = None
        #: Where ``workflow_job`` events go (``FakeGitHub.send_webhooks``); None: none.
        self.webhooks: JobEventSink | None = None
        #: Re-runs: every re-run answers this status (403, 422) when set
        #: (:func:`autoscaler.fakes.github_reruns.refuse_reruns`); the ones accepted:
        #: (repository, job id) of job re-runs, (repository, run id) of rerun-failed-jobs.
        self.rerun_refusal: int | None = None
        self.reruns: list[tuple[str, int]] = []
        self.run_reruns: list[tuple[str, int]] = []
        self._next_id = 1000
        #: Bumped by every change a run's derived status or a repository's runs follow
        #: (a job added, started, ended or re-queued): the memos below hold while it stays.
        self.changes = 0
        self._memo_at = -1
        self._status_memo: dict[int, str] = {}
        self._order_memo: dict[str, list[FakeRun]] = {}
        self._rate_used = 0
        self._rate_reset: float | None = None

    @property
    def jit(self) -> JitRegistry:
        """Just-in-time runner configs (generate-jitconfig), runner groups, the 403 switch;
        made on first use."""
        with self.lock:
            if self._jit is None:
                self._jit = JitRegistry()
            return self._jit

    # --- webhooks
    def _emit(self, job_id: int, action: str) -> None:
        if self.webhooks is not None:
            self.webhooks.job_event(job_id, action)

    # --- state
    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def add_repo(self, name: str, *, private: bool = True) -> None:
        """A repository (private unless told; ``/users/{owner}/repos`` lists public ones)."""
        with self.lock:
            if name not in self._repos:
                self._repos[name] = FakeRepo(self._new_id(), name, private)
                self._runs_by_repo[name] = []

    def queue_job(
        self,
        repo: str,
        labels: Sequence[str],
        *,
        created_at: datetime | None = None,
        name: str = "build",
        run_id: int | None = None,
        status: str = "queued",
    ) -> int:
        """A queued job; a new run of its own unless ``run_id`` names one. Returns its id.

        ``status`` may also be ``waiting`` (an environment approval), ``pending`` or
        ``requested``: jobs that wait, but not for a runner.
        """
        if status not in _WAITING_STATUSES:
            raise ValueError(f"a new job's status is one of {sorted(_WAITING_STATUSES)}")
        with self.lock:
            self.add_repo(repo)
            now = created_at or self.clock()
            if run_id is None or run_id not in self._runs:
                run = FakeRun(run_id or self._new_id(), repo, now)
                self._runs[run.id] = run
                self._runs_by_repo[repo].append(run.id)
            else:
                run = self._runs[run_id]
            job = FakeJob(self._new_id(), run.id, run.repo, name, tuple(labels), now, status)
            self._jobs[job.id] = job
            run.job_ids.append(job.id)
            self.changes += 1
        if status in ("queued", "waiting"):
            self._emit(job.id, status)
        return job.id

    def register_runner(
        self, name: str, labels: Sequence[str], repo: str | Sequence[str] | None = None
    ) -> int:
        """An online, idle self-hosted runner. Returns its id.

        Without ``repo`` it is an org runner (``/orgs/{org}/actions/runners``); with a
        repository name (or several) it is listed by ``/repos/{o}/{r}/actions/runners`` of
        each, and only there. A user owner has repository runners only.
        """
        repos = (repo,) if isinstance(repo, str) else tuple(repo or ())
        if not repos and self.owner_kind == "user":
            raise ValueError("a user owner has no org runners: pass repo=")
        with self.lock:
            for name_of_repo in repos:
                self.add_repo(name_of_repo)
            runner = FakeRunner(self._new_id(), name, tuple(labels), repos=repos)
            self._runners[runner.id] = runner
            return runner.id

    def set_runner_online(self, runner_id: int, online: bool) -> None:
        with self.lock:
            self._runners[runner_id].online = online

    def assign_job(self, job_id: int, runner_id: int) -> None:
        """The runner picks the job: job in_progress (with a step), runner busy."""
        with self.lock:
            job, runner = self._jobs[job_id], self._runners[runner_id]
            job.status, job.started_at = "in_progress", self.clock()
            job.runner_id, job.runner_name = runner.id, runner.name
            runner.busy = True
            self.changes += 1
        self._emit(job_id, "in_progress")

    def complete_job(self, job_id: int) -> None:
        """The job completes; its runner (if any) is idle again, or, ephemeral, removed
        (GitHub removes an ephemeral runner once its one job ends)."""
        with self.lock:
            job = self._jobs[job_id]
            now = self.clock()
            job.status, job.completed_at = "completed", now
            job.started_at = job.started_at or now
            self.changes += 1
            runner = self._runners.get(job.runner_id) if job.runner_id is not None else None
            if runner is not None:
                runner.busy = False
                if runner.ephemeral:
                    del self._runners[runner.id]
        self._emit(job_id, "completed")

    def connect_jit(self, encoded_jit_config: str) -> int:
        """A machine runs ``run.sh --jitconfig``: its runner comes online. Returns the
        runner id; ValueError when the config was used already (single-use), never issued,
        or its runner was deleted meanwhile."""
        runner_id = self.jit.take(encoded_jit_config)
        with self.lock:
            runner = self._runners.get(runner_id)
            if runner is None:
                raise ValueError("the runner of this JIT config was deleted")
            runner.online = True
            return runner_id

    def register_with_token(
        self, token: str, name: str, labels: Sequence[str], *, replace: bool = False
    ) -> int:
        """A machine runs ``config.sh --token``: a runner of ``name`` registers (online,
        idle) where the token was issued (the org, or its repository). Returns its id;
        ValueError when the token expired or was never issued, or the name is taken
        (``config.sh --unattended`` without ``--replace`` stops there). ``replace``
        (``--replace``): a runner of that name is removed first, and the new one takes a
        new id."""
        repo = self.jit.check_token(token, self.clock())
        with self.lock:
            taken = [rid for rid, r in self._runners.items() if r.name == name]
            if taken and not replace:
                raise ValueError(f"a runner named {name} exists already")
            for rid in taken:
                del self._runners[rid]
            return self.register_runner(name, labels, repo)

    def remove_runner(self, runner_id: int) -> None:
        """Deregister a runner. KeyError when unknown, ValueError when busy (the 422)."""
        with self.lock:
            runner = self._runners[runner_id]
            if runner.busy:
                raise ValueError(f'Runner "{runner.name}" is still running a job')
            del self._runners[runner_id]

    def set_run_status(
        self, run_id: int, status: str | None, conclusion: str | None = None
    ) -> None:
        """Make the API report this run's status (``completed`` over a queued job;
        ``waiting``, ``requested`` or ``pending`` with queued jobs) and, when completed,
        its conclusion. ``None`` goes back to the status derived from the jobs."""
        if status is not None and status not in RUN_STATUSES:
            raise ValueError(f"GitHub documents no run status {status!r}")
        if conclusion is not None and conclusion not in RUN_CONCLUSIONS:
            raise ValueError(f"GitHub documents no run conclusion {conclusion!r}")
        with self.lock:
            run = self._runs[run_id]
            run.reported_status, run.conclusion = status, conclusion
            self.changes += 1

    def set_job_status(self, job_id: int, status: str) -> None:
        """A job that waited (``waiting``, ``pending``, ``requested``) is queued now, or
        the other way round."""
        if status not in _WAITING_STATUSES:
            raise ValueError(f"use assign_job/complete_job for {status!r}")
        with self.lock:
            self._jobs[job_id].status = status
            self.changes += 1
        if status in ("queued", "waiting"):
            self._emit(job_id, status)

    def override_job(self, job_id: int, **fields: Any) -> None:
        """Serve these raw JSON fields for the job (bad data on purpose)."""
        with self.lock:
            self._jobs[job_id].overrides.update(fields)

    def override_runner(self, runner_id: int, **fields: Any) -> None:
        with self.lock:
            self._runners[runner_id].overrides.update(fields)

    def queued_jobs(self) -> list[FakeJob]:
        with self.lock:
            return [j for j in self._jobs.values() if j.status == "queued"]

    def job(self, job_id: int) -> FakeJob:
        with self.lock:
            return self._jobs[job_id]

    def jobs(self) -> list[FakeJob]:
        with self.lock:
            return list(self._jobs.values())

    def runners(self) -> list[FakeRunner]:
        with self.lock:
            return list(self._runners.values())

    def issues(self, repo: str) -> list[FakeIssue]:
        """The repository's issues, oldest first."""
        return self.issue_tracker.issues(repo)

    def repos(self) -> list[str]:
        with self.lock:
            return list(self._repos)

    def _memos(self) -> None:
        """Forget what a change since made stale (a listing of a big repository derives
        every run's status: without these, the fake is what a benchmark measures)."""
        if self._memo_at != self.changes:
            self._memo_at = self.changes
            self._status_memo, self._order_memo = {}, {}

    def derived_status(self, run: FakeRun) -> str:
        """The status the run's jobs give it: completed when all are; waiting when one
        waits for an approval; queued when none started; else in progress."""
        self._memos()
        found = self._status_memo.get(run.id)
        if found is None:
            found = self._status_memo[run.id] = self._derive(run)
        return found

    def _derive(self, run: FakeRun) -> str:
        statuses = {self._jobs[j].status for j in run.job_ids}
        if statuses == {"completed"}:
            return "completed"
        if "waiting" in statuses:
            return "waiting"
        if statuses <= {"queued", "pending", "requested"}:
            return "queued"
        return "in_progress"

    def run_status(self, run: FakeRun) -> str:
        """The status the API reports for the run (set, or derived from its jobs)."""
        return run.reported_status or self.derived_status(run)

    def run_conclusion(self, run: FakeRun) -> str | None:
        """The conclusion the API reports: only a completed run has one."""
        if self.run_status(run) != "completed":
            return None
        return run.conclusion or "success"

    def repo_runs(self, repo: str) -> list[FakeRun]:
        """The repository's runs, newest first (the order GitHub lists them in)."""
        self._memos()
        runs = self._order_memo.get(repo)
        if runs is None:
            runs = [self._runs[i] for i in self._runs_by_repo.get(repo, ())]
            runs.sort(key=lambda r: (r.created_at, r.id), reverse=True)
            self._order_memo[repo] = runs
        return list(runs)

    # --- faults
    def inject_fault(
        self,
        path_regex: str,
        status: int,
        *,
        times: int = 1,
        retry_after: float | None = None,
        ratelimit_reset: float | None = None,
    ) -> None:
        """Answer the next ``times`` requests whose path (with query) matches with ``status``.

        ``retry_after`` sets ``Retry-After``; ``ratelimit_reset`` sets
        ``x-ratelimit-remaining: 0`` and ``x-ratelimit-reset``: seconds from the fake's
        clock, or an absolute unix time when larger than 1e9.
        """
        with self.lock:
            self._faults.append(
                Fault(re.compile(path_regex), status, times, retry_after, ratelimit_reset)
            )

    def inject_malformed(self, path_regex: str, *, times: int = 1) -> None:
        """Answer the next ``times`` matching requests with 200 and an invalid JSON body."""
        with self.lock:
            self._faults.append(Fault(re.compile(path_regex), None, times))

    def inject_secondary_limit(
        self,
        path_regex: str,
        *,
        status: int = 403,
        retry_after: float | None = None,
        times: int = 1,
    ) -> None:
        """A secondary rate limit: ``status`` (403 or 429) with GitHub's secondary-limit
        message; ``x-ratelimit-remaining`` is not 0, ``Retry-After`` only when given
        (GitHub documents both)."""
        with self.lock:
            self._faults.append(
                Fault(re.compile(path_regex), status, times, retry_after, secondary=True)
            )

    def inject_body(
        self,
        path_regex: str,
        body: bytes,
        *,
        status: int = 200,
        content_type: str = "application/json; charset=utf-8",
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` matching requests with this raw body (an HTML error
        page from a proxy, deeply nested JSON, a huge page)."""
        with self.lock:
            self._faults.append(
                Fault(re.compile(path_regex), status, times, body=body, content_type=content_type)
            )

    def take_fault(self, path: str) -> Fault | None:
        with self.lock:
            for fault in self._faults:
                if fault.times > 0 and fault.pattern.search(path):
                    fault.times -= 1
                    return fault
            return None

    def count(self, status: int | None = None, path_regex: str = "") -> int:
        """Requests logged so far with this status (any when None) whose path matches."""
        pattern = re.compile(path_regex)
        with self.lock:
            return sum(
                1
                for r in self.requests
                if (status is None or r.status == status) and pattern.search(r.path)
            )
