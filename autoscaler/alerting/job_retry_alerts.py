"""Built-in alerts of the job-retry stage (pure): said once, through the usual receivers.

- **Job retries exhausted**: a run lost to infrastructure again after its automatic
  re-runs (``job_retry.max_attempts``). One alert per run attempt (scope ``repo#job_id``
  of its first lost job); it fires at once, carries the repository, run, first lost job
  (and how many more), runner and the evidence in its description, and resolves after
  :data:`~autoscaler.job_retry.ledger.ALERT_WINDOW` (it is a notification: nothing clears
  it but time).
- **Job re-runs not permitted**: GitHub answered a re-run with 403. One alert per
  repository, firing until a re-run there goes through: re-runs pause for
  ``DENIED_PAUSE``, then one probes again, and a probe GitHub refuses again is the same
  incident, not a new page (the ledger keeps the denial, for at most ``RETENTION``). It
  never repeats (one clear error).

Both go to ``alerts.builtin.receivers`` (empty: every receiver), with its team and priority.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from autoscaler.alerting.builtin_rules import _builtin
from autoscaler.alerting.evaluation import Evaluation
from autoscaler.config import BuiltinAlertsConfig
from autoscaler.job_retry.ledger import Exhausted

EXHAUSTED_RULE = "Job retries exhausted"
DENIED_RULE = "Job re-runs not permitted"
#: Longer than either alert can fire: neither ever repeats.
NEVER_REPEAT = 7 * 24 * 3600.0


def evaluate_job_retries(
    b: BuiltinAlertsConfig,
    exhausted: Sequence[Exhausted],
    denied: Mapping[str, str],
    all_receivers: tuple[str, ...],
) -> list[Evaluation]:
    out: list[Evaluation] = []
    for e in exhausted:
        more = f" and {e.lost_jobs - 1} more" if e.lost_jobs > 1 else ""
        description = (
            f"Job lost to infrastructure again after its re-runs: repository {e.repo}, "
            f"run {e.run_id}, job {e.job_id} ({e.job_name}){more}, "
            f"runner {e.runner or 'none'}, "
            f"attempt {e.attempt}; evidence: {e.evidence}. Re-run it by hand if the "
            "infrastructure is healthy again"
        )
        values = {
            "run_id": e.run_id,
            "job_id": e.job_id,
            "attempt": e.attempt,
            "threshold_breached": 1,
        }
        ev = _builtin(b, EXHAUSTED_RULE, description, values, all_receivers)
        out.append(replace(ev, scope=f"{e.repo}#{e.job_id}", repeat_interval=NEVER_REPEAT))
    for repo, why in sorted(denied.items()):
        description = (
            f"GitHub refused to re-run a job in {repo} (403: {why}). The token or GitHub App "
            "needs Actions: read and write there; re-runs in it are paused"
        )
        ev = _builtin(b, DENIED_RULE, description, {"threshold_breached": 1}, all_receivers)
        out.append(replace(ev, scope=repo, repeat_interval=NEVER_REPEAT))
    return out
