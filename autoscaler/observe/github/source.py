"""GitHub Actions behind the JobSource port: queued jobs, their runs, the org's runners.

One ``observe`` (:mod:`autoscaler.observe.github.poll`) lists the repositories (from the
config, the org's list, ``/installation/repositories`` with a GitHub App, or a user's
public ones), the runs of each in every status that can hold a queued job
(:data:`RUN_STATUSES`), the jobs of each run (``filter=latest``) and the self-hosted
runners, on a fixed pool of ``max_concurrency`` workers fed by a queue. Pages are parsed
once into compact records kept with their ETag (:mod:`.cache`), persisted through a
:class:`PollCacheStore` so a restart is not a cold start. GitHub's rate limit is a budget
(:mod:`.budget`): quiet repositories are re-listed less often before busy ones are.

A user owner (or credentials that cannot see the org's runners) answers 404 on
``/orgs/{owner}/actions/runners``: the source then lists the runners of each watched
repository instead (deduplicated by id) and remembers both the choice (one org probe per
source) and each runner's repository, so ``remove_runner`` deletes at the repository URL.

``find_runner(name)`` asks the same listing filtered by GitHub's documented ``name`` query
parameter (the org's, or each watched repository's), right before an orphan instance is
terminated. Only an exact name match counts: a server that ignores ``name`` (an old GitHub
Enterprise Server) then costs a full listing, never a wrong answer.

The runners' credentials (:mod:`.registration`): ``generate_jit_config`` for an ephemeral
instance, ``create_registration_token`` for a persistent one.

Bad data skips the item (counted in ``github_skipped_items_total{kind}``, logged once per
kind); a malformed runs/jobs page skips that page. A malformed repository or runner list
fails the poll (TransientError): a partial runner list would make live runners look gone.
Whatever else escapes (a bug, an unexpected exception) becomes a TransientError too: the
poll fails, classified, and the tick goes on.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from autoscaler.config import GitHubConfig
from autoscaler.domain import CompletedRun, Observation, Runner, RunProgress
from autoscaler.errors import (
    AutoscalerError,
    ConfigError,
    DeferredError,
    NotFoundError,
    StateError,
    TransientError,
)
from autoscaler.observe.github.auth import AppAuth, Auth, TokenAuth
from autoscaler.observe.github.cache import EtagCache, PollCacheStore
from autoscaler.observe.github.delivery_reader import DeliveryLog
from autoscaler.observe.github.failures import CompletedRuns, newer_attempt_running
from autoscaler.observe.github.fetch import Settings
from autoscaler.observe.github.http import GitHubHttp
from autoscaler.observe.github.parse import Skips
from autoscaler.observe.github.poll import Lean, ListedScope, Poll
from autoscaler.observe.github.records import skip_counts
from autoscaler.observe.github.registration import create_registration_token, generate_jit_config
from autoscaler.observe.github.units import RUN_STATUSES
from autoscaler.observe.github.workers import WorkerPool
from autoscaler.ports import JitRunner, RegistrationToken
from autoscaler.telemetry import Metrics

__all__ = ["RUN_STATUSES", "GitHubSource"]

log = logging.getLogger("autoscaler.observe.github")

#: A runner lookup (before an orphan is terminated) gives up after this many seconds.
FIND_RUNNER_DEADLINE = 30.0
#: A poll may take this share of the poll interval; the rest is the tick's (scale, alert).
DEADLINE_SHARE = 0.8


class GitHubSource:
    """JobSource over GitHub's REST API (github.com or GitHub Enterprise Server)."""

    def __init__(
        self,
        config: GitHubConfig,
        metrics: Metrics,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        wall_clock: Callable[[], float] = time.time,
        poll_interval: float = 30.0,
        cache_store: PollCacheStore | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._owner = quote(config.owner, safe="")
        self._wall_clock = wall_clock
        self._cache_store = cache_store
        cache = EtagCache()
        if cache_store is not None:
            try:
                loaded = cache.load(cache_store, wall_clock())
            except Exception as exc:  # a broken store must not stop the controller
                log.warning("GitHub cache not loaded from the state store: %s", exc)
            else:
                log.info("GitHub cache: %d pages loaded from the state store", loaded)
        self._http = GitHubHttp(
            config.api_url,
            config.timeout,
            metrics,
            transport,
            sleep,
            wall_clock,
            cache=cache,
            proxy=config.proxy,
        )
        self.auth: Auth
        if config.app is not None:
            self.auth = AppAuth(config.app, self._exchange, wall_clock)
        elif config.token is not None:
            self.auth = TokenAuth(config.token)
        else:
            raise ConfigError(["github: set github.token or github.app"])
        self._http.auth = self.auth
        self._pool = WorkerPool(config.max_concurrency)
        settings = Settings(
            owner=self._owner,
            repos=config.repos,
            app=config.app is not None,
            poll_interval=poll_interval,
            deadline=DEADLINE_SHARE * poll_interval,
            share=config.rate_limit_share,
            concurrency=config.max_concurrency,
        )
        skips = self._skips = Skips(metrics)
        self._poll = Poll(self._http, self._pool, metrics, settings, skips)
        #: Jobs of the runs the poll saw complete (the job-retry stage's source).
        self.completed = CompletedRuns(self._http, self._owner, self._poll.finished, skips)

    def __repr__(self) -> str:
        return f"GitHubSource(api_url={self._config.api_url!r}, owner={self._config.owner!r})"

    def close(self) -> None:
        self._pool.close()
        self._http.close()

    # --- JobSource
    def observe(self, now: datetime) -> Observation:
        return self._observe(now, None)

    def reconcile(self, now: datetime, lean: Lean, *, runs: bool = True) -> Observation:
        """A webhook reconcile: the poll, the jobs of known runs listed only where
        ``lean`` gives a reason (:mod:`.reconcile_plan`); ``runs=False``: no runs
        listing (the delivery log showed no delivery lost)."""
        return self._observe(now, lean, runs=runs)

    def scope(self) -> ListedScope:
        """What the last poll listed: the runs whose jobs, and whether every runs listing."""
        return self._poll.scope()

    def delivery_log(self, hook_id: int) -> DeliveryLog:
        """The org webhook ``hook_id``'s delivery log, read with this source's credentials
        and rate-limit gate."""
        return DeliveryLog(self._http, self._owner, hook_id, self._metrics, self._skips)

    def _observe(self, now: datetime, lean: Lean | None, *, runs: bool = True) -> Observation:
        self._http.clock_skew = None
        try:
            observation = self._poll.run(now, lean, runs=runs)
        except AutoscalerError:
            raise
        except Exception as exc:
            log.exception("GitHub poll failed unexpectedly")
            raise TransientError(
                f"GitHub poll failed: unexpected {type(exc).__name__}", code=type(exc).__name__
            ) from None
        finally:
            self._save_cache()
        return replace(observation, clock_skew_seconds=self._http.clock_skew)

    def _save_cache(self) -> None:
        cache = self._http.cache
        cache.sweep(self._wall_clock())
        if self._cache_store is None:
            return
        try:
            cache.flush(self._cache_store)
        except StateError as exc:
            # The alert stage says this store's problem once a tick, as an ERROR naming the
            # file and what to do (and fails readiness): not repeated here, only its kind.
            log.warning(
                "GitHub cache not saved to the state store (%s %s); the next flush retries",
                exc.kind,
                exc.code,
            )
        except Exception as exc:  # the poll's picture is fine; the next flush retries
            log.warning("GitHub cache not saved to the state store: %s", exc)

    def find_runner(self, name: str) -> Runner | None:
        """The runner registered as exactly ``name`` now, or None (GitHub's ``?name=``).

        Raises our errors like any call, and TransientError when an item of the answer is
        malformed: "cannot tell" must never read as "not there"."""
        query = f"?name={quote(name, safe='')}"
        if self._poll.runner_scope != "repos":
            return self._named(f"/orgs/{self._owner}/actions/runners{query}", name)
        for repo in self._poll.watched_repos():
            path = f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runners{query}"
            found = self._named(path, name)
            if found is not None:
                self._poll.runner_repos[found.id] = repo
                return found
        return None

    def _named(self, path: str, name: str) -> Runner | None:
        deadline = time.monotonic() + FIND_RUNNER_DEADLINE
        listed = self._poll.fetch.runners(path, deadline)
        if skip_counts(listed.records).get("runner", 0):
            raise TransientError(
                f"GitHub GET {path.split('?', maxsplit=1)[0]}: a malformed runner item"
            )
        runners: list[Runner] = listed.items
        return next((r for r in runners if r.name == name), None)

    def remove_runner(self, runner_id: int) -> None:
        """DELETE the runner: RejectedError when busy (422), NotFoundError when gone.

        An org runner at the org URL; a repository runner (the "repos" scope) at the URL of
        the repository that last listed it.
        """
        runner_id = int(runner_id)
        path = f"/orgs/{self._owner}/actions/runners/{runner_id}"
        if self._poll.runner_scope == "repos":
            repo = self._poll.runner_repos.get(runner_id)
            if repo is None:
                raise NotFoundError(
                    f"GitHub runner {runner_id}: no watched repository lists it", code="404"
                )
            path = f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runners/{runner_id}"
        self._http.send("DELETE", path, "runner_delete")
        self._poll.runner_repos.pop(runner_id, None)

    # --- RunnerRegistrar (the credentials the controller hands to instances)
    def generate_jit_config(
        self, name: str, labels: Sequence[str], runner_group_id: int, work_folder: str
    ) -> JitRunner:
        """Create an ephemeral runner and its single-use config (:mod:`.registration`): at the org,
        or, for a user owner (the "repos" scope), at the first watched repository, where
        ``remove_runner`` then finds it."""
        path = f"/orgs/{self._owner}/actions/runners/generate-jitconfig"
        repo = None
        if self._poll.runner_scope == "repos":
            repos = sorted(self._poll.watched_repos())
            if not repos:
                raise NotFoundError("no watched repository to register a runner at", code="404")
            repo = repos[0]
            path = f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runners/generate-jitconfig"
        jit = generate_jit_config(self._http, path, name, labels, runner_group_id, work_folder)
        if repo is not None:
            self._poll.runner_repos[jit.runner_id] = repo
        return jit

    def create_registration_token(self) -> RegistrationToken:
        """A one-hour token that registers runners (:mod:`.registration`): the org's, or,
        for a user owner, the first watched repository's (where the pool's ``github_url``
        must point)."""
        path = f"/orgs/{self._owner}/actions/runners/registration-token"
        if self._poll.runner_scope == "repos":
            repos = sorted(self._poll.watched_repos())
            if not repos:
                raise NotFoundError("no watched repository to register a runner at", code="404")
            repo = quote(repos[0], safe="")
            path = f"/repos/{self._owner}/{repo}/actions/runners/registration-token"
        return create_registration_token(self._http, path)

    # --- job retry (autoscaler.job_retry.stage's CompletedRunSource and JobRerunner)
    def completed_runs(self, now: datetime) -> list[CompletedRun]:
        """Runs the poll saw complete, with a failed or cancelled job: every job of each."""
        return self.completed.completed_runs(now)

    def read_run(self, repo: str, run_id: int) -> CompletedRun | RunProgress:
        """A run a webhook told of a failure in: every job of it once it has completed
        (``GET .../runs/{run_id}``, then its jobs), else where it is now. DeferredError
        while GitHub's remaining rate limit is kept for the poll (ask again later)."""
        if not self.completed.affordable():
            raise DeferredError("the rate limit left is kept for the poll")
        progress = self.run_progress(repo, run_id)
        if progress.status != "completed":
            return progress
        run = self.completed.whole(repo, run_id, progress.attempt)
        if newer_attempt_running(run):  # re-run between the two reads
            return RunProgress("queued", run.attempt)
        return run

    def rerun_failed_jobs(self, repo: str, run_id: int) -> None:
        """``POST /repos/{o}/{r}/actions/runs/{run_id}/rerun-failed-jobs`` (201): the run's
        failed and cancelled jobs, and their dependents, in one new attempt.
        AuthenticationError on 403, RejectedError on 422, NotFoundError on 404.
        Sent once: a TransientError (no answer, a 5xx) may hide a re-run that went
        through, and the stage reads the run before it asks again."""
        path = (
            f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runs/{int(run_id)}"
            "/rerun-failed-jobs"
        )
        self._http.send("POST", path, "run_rerun_failed_jobs", once=True)

    def run_progress(self, repo: str, run_id: int) -> RunProgress:
        """``GET /repos/{o}/{r}/actions/runs/{run_id}``: its ``status`` and ``run_attempt``
        (read after a re-run's 403). TransientError when the body is not a run."""
        path = f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runs/{int(run_id)}"
        answer = self._http.send("GET", path, "run")
        try:
            body = json_object(answer.content)
        except ValueError:
            body = None
        status = body.get("status") if body is not None else None
        attempt = body.get("run_attempt") if body is not None else None
        if not isinstance(status, str) or not isinstance(attempt, int) or attempt < 1:
            raise TransientError(f"GitHub GET {path}: the body is not a workflow run")
        return RunProgress(status, attempt)

    # --- the calls
    def _exchange(self, installation_id: int, authorization: str) -> Mapping[str, Any]:
        path = f"/app/installations/{int(installation_id)}/access_tokens"
        answer = self._http.send("POST", path, "app_token", authorization=authorization)
        try:
            body = json_object(answer.content)
        except ValueError:
            body = None
        if body is None:
            raise TransientError(f"GitHub POST {path}: the body is not a JSON object")
        return body


def json_object(content: bytes) -> dict[str, Any] | None:
    """A JSON object, or None (anything else, too deep included). Raises ValueError."""
    try:
        body = json.loads(content)
    except RecursionError:
        return None
    return body if isinstance(body, dict) else None
