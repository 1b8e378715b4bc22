"""The ``job_retry`` section: re-run jobs lost to infrastructure, once, and only those.

```yaml
job_retry:
  enabled: false               # opt in: it writes to repositories (Actions: write)
  max_attempts: 2              # a run attempt below this may be re-run (2: one re-run)
  max_failed_jobs_per_run: 5   # more failed jobs than this in a run: a human looks
  max_per_hour: 100            # re-runs per hour at most; the rest wait for the next hour
  retry_exit_codes: []         # e.g. [137, 143]: an exit code alone is never enough
```

Read and validated here (every problem reported with the others); the pure classifier
(:mod:`autoscaler.job_retry.classify`) and decision (:mod:`autoscaler.job_retry.decide`) read the
frozen value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoscaler.config.reader import Reader

KEYS = ("enabled", "max_attempts", "max_failed_jobs_per_run", "max_per_hour", "retry_exit_codes")


@dataclass(frozen=True)
class JobRetryConfig:
    enabled: bool = False
    """False (the default): failed jobs are not even looked at. True needs a token or app
    with Actions read and write on the repositories (a re-run is a write)."""
    max_attempts: int = 2
    """A job is re-run only while its run's attempt is below this (GitHub counts the first
    attempt as 1): 2 allows one automatic re-run, 1 none."""
    max_failed_jobs_per_run: int = 5
    """When more jobs than this failed in one run attempt, none is re-run: that is an
    outage or a real break, for a human."""
    max_per_hour: int = 100
    """Re-runs in any rolling hour at most; the rest are deferred to later ticks."""
    retry_exit_codes: frozenset[int] = frozenset()
    """Exit codes (from the job's annotations) that count as infrastructure evidence. Empty
    by default: 137 is SIGKILL, from a reclaimed machine or from the job's own OOM."""


def read_job_retry(r: Reader, value: Any) -> JobRetryConfig:
    p = "job_retry"
    m = r.mapping(value, p, KEYS)
    codes: list[int] = []
    raw_codes = m.get("retry_exit_codes")
    if raw_codes is not None and not isinstance(raw_codes, list):
        r.problem(f"{p}.retry_exit_codes", "must be a list of exit codes (integers 1-255)")
    for i, raw in enumerate(raw_codes if isinstance(raw_codes, list) else []):
        path = f"{p}.retry_exit_codes[{i}]"
        code = r.integer(raw, path, 0, minimum=0)
        if r.ok(path) and not 1 <= code <= 255:
            r.problem(path, f"must be an exit code from 1 to 255, got {code}")
        elif r.ok(path):
            codes.append(code)
    return JobRetryConfig(
        enabled=r.boolean(m.get("enabled"), f"{p}.enabled", False),
        max_attempts=r.integer(m.get("max_attempts"), f"{p}.max_attempts", 2, minimum=1),
        max_failed_jobs_per_run=r.integer(
            m.get("max_failed_jobs_per_run"), f"{p}.max_failed_jobs_per_run", 5, minimum=1
        ),
        max_per_hour=r.integer(m.get("max_per_hour"), f"{p}.max_per_hour", 100, minimum=0),
        retry_exit_codes=frozenset(codes),
    )
