"""Small ``workflow_job`` payloads in GitHub's documented shape, for the webhook tests."""

from __future__ import annotations

import json
from typing import Any

SECRET = b"It's a Secret to Everybody"


def payload(
    action: str,
    job_id: int = 1,
    *,
    status: str | None = None,
    labels: tuple[str, ...] = ("self-hosted", "linux.4xlarge"),
    run_id: int = 10,
    repo: str = "pytorch",
    created_at: str = "2026-11-30T03:00:00Z",
    started_at: str | None = None,
    runner_name: str | None = None,
    conclusion: str | None = None,
    run_attempt: int = 1,
    steps: int = 0,
) -> dict[str, Any]:
    """A delivery of ``action`` for job ``job_id`` (status defaults to the action's)."""
    status = status or action
    return {
        "action": action,
        "workflow_job": {
            "id": job_id,
            "run_id": run_id,
            "run_attempt": run_attempt,
            "name": f"build {job_id}",
            "status": status,
            "conclusion": conclusion if status == "completed" else None,
            "labels": list(labels),
            "created_at": created_at,
            "started_at": started_at or created_at,
            "completed_at": "2026-11-30T03:09:00Z" if status == "completed" else None,
            "runner_name": runner_name,
            "steps": [{"name": f"step {i}", "status": "completed"} for i in range(steps)],
        },
        "repository": {"name": repo, "full_name": f"octo-org/{repo}"},
    }


def body(action: str, job_id: int = 1, **kwargs: Any) -> bytes:
    return json.dumps(payload(action, job_id, **kwargs)).encode()
