"""GitHub Actions behind the JobSource port: queued/in-progress jobs and org runners.

One ``observe`` lists the repositories (from the config, or the owner's list), the queued
and in-progress runs of each, the jobs of each run (``filter=latest``; a run in progress
can still have queued jobs) and the org's self-hosted runners. Requests run on a bounded
thread pool over one ``httpx.Client``; jobs of a repo are fetched as soon as its runs are
known, and the runner list in parallel with everything else.

A user owner (or credentials that cannot see the org's runners) answers 404 on
``/orgs/{owner}/actions/runners``: the source then lists the runners of each watched
repository instead (deduplicated by id) and remembers both the choice (one org probe per
source) and each runner's repository, so ``remove_runner`` deletes at the repository URL.

``find_runner(name)`` asks the same listing filtered by GitHub's documented ``name`` query
parameter (the org's, or each watched repository's), right before an orphan instance is
terminated. Only an exact name match counts: a server that ignores ``name`` (an old GitHub
Enterprise Server) then costs a full listing, never a wrong answer.

Bad data skips the item (counted in ``github_skipped_items_total{kind}``, logged once per
kind); a malformed runs/jobs page skips that page. A malformed repository or runner list
fails the poll (TransientError): a partial runner list would make live runners look gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from autoscaler.config import GitHubConfig
from autoscaler.domain import Job, Observation, Runner
from autoscaler.errors import ConfigError, NotFoundError, TransientError
from autoscaler.observe.github.auth import AppAuth, Auth, TokenAuth
from autoscaler.observe.github.http import BadPage, GitHubHttp
from autoscaler.observe.github.parse import (
    BadItem,
    RunRef,
    Skips,
    merge_runners,
    parse_job,
    parse_repo,
    parse_run,
    parse_runner,
)
from autoscaler.telemetry import Metrics

RUN_STATUSES = ("queued", "in_progress")
log = logging.getLogger("autoscaler.observe.github")


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
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._owner = quote(config.owner, safe="")
        self._http = GitHubHttp(
            config.api_url,
            config.timeout,
            config.max_concurrency,
            metrics,
            transport,
            sleep,
            wall_clock,
        )
        self.auth: Auth
        if config.app is not None:
            self.auth = AppAuth(config.app, self._exchange, wall_clock)
        elif config.token is not None:
            self.auth = TokenAuth(config.token)
        else:
            raise ConfigError(["github: set github.token or github.app"])
        self._http.auth = self.auth
        self._pool = ThreadPoolExecutor(config.max_concurrency, thread_name_prefix="github")
        self._repo_list_path: str | None = None
        #: Where runners are listed: "org", "repos" (after the org endpoint's 404), or None
        #: until the first answer.
        self._runner_scope: str | None = None
        #: Runner id -> the repository that listed it (last observe, "repos" scope only).
        self._runner_repos: dict[int, str] = {}
        #: The repositories the last observe watched (where find_runner looks, "repos").
        self._repos_seen: list[str] = []
        self._logged_kinds: set[str] = set()

    def __repr__(self) -> str:
        return f"GitHubSource(api_url={self._config.api_url!r}, owner={self._config.owner!r})"

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._http.close()

    # --- JobSource
    def observe(self, now: datetime) -> Observation:
        skips = Skips(self._metrics, self._logged_kinds)
        self._http.begin_tick()
        pending: dict[Future[Any], str] = {}
        try:
            if self._runner_scope != "repos":
                pending[self._pool.submit(self._runners, skips)] = "runners"
            repos = self._repos(skips)
            if self._runner_scope == "repos":
                self._submit_repo_runners(pending, repos, skips)
            for repo in repos:
                for status in RUN_STATUSES:
                    pending[self._pool.submit(self._runs, repo, status, skips)] = "runs"
            runs_seen: set[int] = set()
            jobs: dict[int, Job] = {}
            runners: list[Runner] = []
            by_repo: dict[str, list[Runner]] = {}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    kind = pending.pop(future)
                    if kind == "runners":
                        try:
                            runners = future.result()
                        except NotFoundError as exc:
                            if self._runner_scope == "org":
                                raise
                            self._runner_scope = "repos"
                            log.warning("%s; listing runners per repository instead", exc)
                            self._submit_repo_runners(pending, repos, skips)
                        else:
                            self._runner_scope = "org"
                        continue
                    result = future.result()
                    if kind == "repo_runners":
                        by_repo[result[0]] = result[1]
                    elif kind == "runs":
                        for run in result:
                            if run.id not in runs_seen:
                                runs_seen.add(run.id)
                                pending[self._pool.submit(self._jobs, run, skips)] = "jobs"
                    else:
                        jobs.update((job.id, job) for job in result)
        except BaseException:
            for future in pending:
                future.cancel()
            wait(pending)
            raise
        self._http.end_tick()
        if self._runner_scope == "repos":
            runners, self._runner_repos = merge_runners(repos, by_repo)
        self._repos_seen = list(repos)
        return Observation(
            observed_at=now,
            jobs=tuple(sorted(jobs.values(), key=lambda j: j.id)),
            runners=tuple(runners),
            skipped_items=skips.count,
            skipped_runners=skips.by_kind.get("runner", 0),
            clock_skew_seconds=self._http.clock_skew,
        )

    def find_runner(self, name: str) -> Runner | None:
        """The runner registered as exactly ``name`` now, or None (GitHub's ``?name=``).

        Raises our errors like any call, and TransientError when an item of the answer is
        malformed: "cannot tell" must never read as "not there"."""
        query = f"?name={quote(name, safe='')}"
        if self._runner_scope != "repos":
            return self._named(f"/orgs/{self._owner}/actions/runners{query}", name)
        for repo in self._repos_seen:
            path = f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runners{query}"
            found = self._named(path, name)
            if found is not None:
                self._runner_repos[found.id] = repo
                return found
        return None

    def remove_runner(self, runner_id: int) -> None:
        """DELETE the runner: RejectedError when busy (422), NotFoundError when gone.

        An org runner at the org URL; a repository runner (the "repos" scope) at the URL of
        the repository that last listed it.
        """
        runner_id = int(runner_id)
        path = f"/orgs/{self._owner}/actions/runners/{runner_id}"
        if self._runner_scope == "repos":
            repo = self._runner_repos.get(runner_id)
            if repo is None:
                raise NotFoundError(
                    f"GitHub runner {runner_id}: no watched repository lists it", code="404"
                )
            path = f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runners/{runner_id}"
        self._http.send("DELETE", path, "runner_delete")
        self._runner_repos.pop(runner_id, None)

    def _named(self, path: str, name: str) -> Runner | None:
        skips = Skips(self._metrics, self._logged_kinds)
        runners = self._runners(skips, path)
        if skips.count:
            raise TransientError(
                f"GitHub GET {path.split('?', maxsplit=1)[0]}: a malformed runner item"
            )
        return next((r for r in runners if r.name == name), None)

    # --- the calls
    def _exchange(self, installation_id: int, authorization: str) -> Mapping[str, Any]:
        path = f"/app/installations/{int(installation_id)}/access_tokens"
        response = self._http.send("POST", path, "app_token", authorization=authorization)
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise TransientError(f"GitHub POST {path}: the body is not a JSON object")
        return body

    def _list(self, path: str, endpoint: str, key: str | None) -> list[Any]:
        """Every item over the Link pages. Raises BadPage when a page is not the shape."""
        items: list[Any] = []
        url: str | None = f"{path}{'&' if '?' in path else '?'}per_page=100"
        while url is not None:
            page = self._http.get(url, endpoint)
            chunk = page.body if key is None else _get(page.body, key)
            if not isinstance(chunk, list):
                raise BadPage(f"{endpoint}: expected a list")
            items.extend(chunk)
            url = page.next_url
        return items

    def _repos(self, skips: Skips) -> list[str]:
        if self._config.repos is not None:
            return list(self._config.repos)
        items: list[Any] | None = None
        candidates = [f"/orgs/{self._owner}/repos", f"/users/{self._owner}/repos"]
        if self._repo_list_path is not None:
            candidates = [self._repo_list_path]
        for index, path in enumerate(candidates):
            try:
                items = self._list(path, "repos", None)
            except NotFoundError:
                if index + 1 == len(candidates):
                    raise
                continue
            except BadPage as exc:
                raise TransientError(f"GitHub GET {path}: malformed response ({exc})") from None
            self._repo_list_path = path
            break
        names = []
        for item in items or []:
            try:
                name = parse_repo(item)
            except BadItem as exc:
                skips.skip("repo", str(exc))
                continue
            if name is not None:
                names.append(name)
        return names

    def _runs(self, repo: str, status: str, skips: Skips) -> list[RunRef]:
        path = f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runs?status={status}"
        try:
            items = self._list(path, "runs", "workflow_runs")
        except BadPage as exc:
            skips.skip("runs_page", str(exc))
            return []
        runs = []
        for item in items:
            try:
                runs.append(parse_run(item, repo))
            except BadItem as exc:
                skips.skip("run", str(exc))
        return runs

    def _jobs(self, run: RunRef, skips: Skips) -> list[Job]:
        repo = quote(run.repo, safe="")
        path = f"/repos/{self._owner}/{repo}/actions/runs/{run.id}/jobs?filter=latest"
        try:
            items = self._list(path, "jobs", "jobs")
        except BadPage as exc:
            skips.skip("jobs_page", str(exc))
            return []
        except NotFoundError:
            return []  # the run vanished (deleted) between the two calls
        jobs = []
        for item in items:
            try:
                job = parse_job(item, run)
            except BadItem as exc:
                skips.skip("job", str(exc))
                continue
            if job is not None:
                jobs.append(job)
        return jobs

    def _submit_repo_runners(
        self, pending: dict[Future[Any], str], repos: list[str], skips: Skips
    ) -> None:
        for repo in repos:
            pending[self._pool.submit(self._repo_runners, repo, skips)] = "repo_runners"

    def _repo_runners(self, repo: str, skips: Skips) -> tuple[str, list[Runner]]:
        path = f"/repos/{self._owner}/{quote(repo, safe='')}/actions/runners"
        return repo, self._runners(skips, path)

    def _runners(self, skips: Skips, path: str | None = None) -> list[Runner]:
        """Every runner at ``path`` (the org's list by default); malformed -> TransientError."""
        path = path or f"/orgs/{self._owner}/actions/runners"
        try:
            items = self._list(path, "runners", "runners")
        except BadPage as exc:
            raise TransientError(f"GitHub GET {path}: malformed response ({exc})") from None
        runners = []
        for item in items:
            try:
                runners.append(parse_runner(item))
            except BadItem as exc:
                skips.skip("runner", str(exc))
        return runners


def _get(body: Any, key: str) -> Any:
    return body.get(key) if isinstance(body, dict) else None
