"""The ``job_retry`` section: re-run jobs lost to infrastructure, once, and only those.

```yaml
job_retry:
  enabled: false               # opt in: it writes to repositories (Actions: write)
  max_attempts: 2              # a run attempt below this may be re-run (2: one re-run)
  max_failed_jobs_per_run: 5   # more failed jobs than this in a run: a human looks
  max_per_hour: 100            # re-runs per hour at most; the rest wait for the next hour
  retry_exit_codes: []         # e.g. [137, 143]: an exit code alone is never enough
```

The pure classifier (:mod:`autoscaler.job_retry.classify`) and decision
(:mod:`autoscaler.job_retry.decide`) read the frozen value.
"""

from __future__ import annotations

from typing import Annotated

from autoscaler.config.values import Flag, Integer, Section


class JobRetryConfig(Section):
    """Re-run jobs lost to infrastructure, once, and only those."""

    enabled: Annotated[bool, Flag()] = False
    """False (the default): failed jobs are not even looked at. True needs a token or app
    with Actions read and write on the repositories (a re-run is a write)."""
    max_attempts: Annotated[int, Integer(1)] = 2
    """A job is re-run only while its run's attempt is below this (GitHub counts the first
    attempt as 1): 2 allows one automatic re-run, 1 none."""
    max_failed_jobs_per_run: Annotated[int, Integer(1)] = 5
    """When more jobs than this failed in one run attempt, none is re-run: that is an
    outage or a real break, for a human."""
    max_per_hour: Annotated[int, Integer()] = 100
    """Re-runs in any rolling hour at most; the rest are deferred to later ticks."""
    retry_exit_codes: frozenset[Annotated[int, Integer(1, 255)]] = frozenset()
    """Exit codes (from the job's annotations) that count as infrastructure evidence. Empty
    by default: 137 is SIGKILL, from a reclaimed machine or from the job's own OOM."""
