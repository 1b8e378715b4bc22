"""A realistic fake GitHub to check against the description: every state the client meets.

An organization with queued, in-progress and completed jobs (one run mixing them), a
completed run, a ``waiting`` run holding a queued job, a run GitHub reports ``completed``
over a queued job, busy, idle and offline org runners, repository runners, and a GitHub
App; and a user account whose runners live on its repositories. ``ids`` names what a
request may point at (``{mixed_run}``, ``{busy_runner}``, ``{repo_spare}``...).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_reruns import LOST, annotation, fail_job

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
CPU = ("self-hosted", "Linux", "X64", "linux.4xlarge")
GPU = ("self-hosted", "linux.g5.4xlarge.nvidia.gpu")
TOKEN = "fake-token"  # the fake's own token
APP_ID = 42
INSTALLATION_ID = 77


@functools.cache
def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Scenario:
    fake: FakeGitHub
    ids: dict[str, object]

    def app_jwt(self) -> str:
        """A JWT of the scenario's App, as the client signs it (iat backdated 60 s)."""
        now = int(T0.timestamp())
        claims = {"iat": now - 60, "exp": now + 540, "iss": str(APP_ID)}
        return jwt.encode(claims, _key(), algorithm="RS256")


def private_key_pem() -> str:
    """The scenario App's private key (PEM), as ``github.app.private_key_file`` holds it."""
    return (
        _key()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )


@contextmanager
def scenario(owner_kind: str = "org") -> Iterator[Scenario]:
    """The fake, started, with the scenario's state (an org, or a user account)."""
    public = (
        _key()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    owner = "demo-org" if owner_kind == "org" else "demo-user"
    with FakeGitHub(
        owner,
        TOKEN,
        clock=lambda: T0,
        app_id=APP_ID,
        app_public_key_pem=public.decode(),
        owner_kind=owner_kind,
    ) as fake:
        ids = _org(fake) if owner_kind == "org" else _user(fake)
        yield Scenario(fake, {"owner": owner, "installation": INSTALLATION_ID, **ids})


def _org(fake: FakeGitHub) -> dict[str, object]:
    busy = fake.register_runner("cpu-busy", CPU)
    idle = fake.register_runner("cpu-idle", CPU)
    offline = fake.register_runner("gpu-offline", GPU)
    fake.set_runner_online(offline, False)
    spare = fake.register_runner("cpu-spare", CPU)
    web_busy = fake.register_runner("web-busy", CPU, repo="web")
    web_spare = fake.register_runner("web-spare", CPU, repo="web")
    fake.add_repo("docs")

    queued = fake.queue_job("api", CPU, created_at=T0 - timedelta(minutes=12))
    mixed = fake.job(queued).run_id
    running = fake.queue_job("api", CPU, run_id=mixed, name="test")
    fake.assign_job(running, busy)
    done = fake.queue_job("api", CPU, run_id=mixed, name="lint")
    fake.assign_job(done, idle)
    fake.complete_job(done)
    fake.queue_job("api", GPU, run_id=mixed, name="gpu-test")

    alone = fake.queue_job("api", GPU, name="gpu-only", created_at=T0 - timedelta(minutes=40))
    finished = fake.queue_job("api", CPU, name="docs", created_at=T0 - timedelta(hours=1))
    fake.assign_job(finished, idle)
    fake.complete_job(finished)

    # An environment approval elsewhere in the run: the run waits, its job is queued.
    deploy = fake.queue_job("api", CPU, name="deploy")
    fake.set_run_status(fake.job(deploy).run_id, "waiting")
    # GitHub sometimes reports a run completed while a job of it stays queued.
    ghost = fake.queue_job("web", CPU, created_at=T0 - timedelta(days=2))
    fake.set_run_status(fake.job(ghost).run_id, "completed")
    web = fake.queue_job("web", CPU, name="web-build")
    fake.assign_job(web, web_busy)
    # A job whose runner was lost (job retry reads its annotations and re-runs it).
    lost = fake.queue_job("api", GPU, name="gpu-lost", created_at=T0 - timedelta(minutes=90))
    fake.assign_job(lost, offline)
    fail_job(fake, lost, annotations=[annotation(LOST.format(runner="gpu-offline"))])
    return {
        "lost_job": lost,
        "lost_run": fake.job(lost).run_id,
        "busy_runner": busy,
        "spare_runner": spare,
        "repo_busy": web_busy,
        "repo_spare": web_spare,
        "queued_run": fake.job(alone).run_id,
        "mixed_run": mixed,
        "mixed_job": running,
        "finished_run": fake.job(finished).run_id,
        "waiting_run": fake.job(deploy).run_id,
        "ghost_run": fake.job(ghost).run_id,
    }


def _user(fake: FakeGitHub) -> dict[str, object]:
    busy = fake.register_runner("own-busy", CPU, repo="site")
    spare = fake.register_runner("own-spare", CPU, repo="site")
    queued = fake.queue_job("site", CPU, created_at=T0 - timedelta(minutes=3))
    running = fake.queue_job("site", CPU, run_id=fake.job(queued).run_id, name="test")
    fake.assign_job(running, busy)
    return {"repo_busy": busy, "repo_spare": spare}
