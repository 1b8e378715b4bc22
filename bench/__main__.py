"""``python -m bench [NAME ...]``: run the benchmarks (all by default); exit 1 if an aim is missed.

Each benchmark is one function that prints its table and returns True when its aims are met.
Add one by writing ``bench/<name>.py`` with ``run() -> bool`` and listing it below.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench import (
    failover,
    github_budget,
    github_poll,
    index_requests,
    ingest,
    job_retry,
    listener,
    scaling,
    state_requests,
    webhooks,
)

BENCHMARKS: dict[str, Callable[[], bool]] = {
    "github_poll": github_poll.run,
    "github_budget": github_budget.run,
    "scaling": scaling.run,
    "failover": failover.run,
    "state_requests": state_requests.run,
    "index_requests": index_requests.run,
    "job_retry": job_retry.run,
    "webhooks": webhooks.run,
    "listener": listener.run,
    "ingest": ingest.run,
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    missed = [name for name in names if not BENCHMARKS[name]()]
    if missed:
        print(f"aims missed: {', '.join(missed)}")
        return 1
    print("all aims met")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
