"""``python -m bench [NAME ...]``: run the benchmarks (all by default); exit 1 only if an
aim this machine can judge was missed (:mod:`bench.aims`), naming each aim missed or not
judged.

Each benchmark is one function that prints its table, checks its aims through
:mod:`bench.aims` and returns False when one it could judge was missed. Add one by writing
``bench/<name>.py`` with ``run() -> bool`` and listing it below.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench import (
    aims,
    cli_start,
    config_load,
    failover,
    github_budget,
    github_payloads,
    github_poll,
    index_requests,
    ingest,
    job_retry,
    listener,
    scaling,
    state_requests,
    steady_tick,
    warm_pools,
    webhooks,
)

BENCHMARKS: dict[str, Callable[[], bool]] = {
    "github_poll": github_poll.run,
    "steady_tick": steady_tick.run,
    "github_budget": github_budget.run,
    "github_payloads": github_payloads.run,
    "scaling": scaling.run,
    "warm_pools": warm_pools.run,
    "failover": failover.run,
    "state_requests": state_requests.run,
    "index_requests": index_requests.run,
    "job_retry": job_retry.run,
    "webhooks": webhooks.run,
    "listener": listener.run,
    "config_load": config_load.run,
    "cli_start": cli_start.run,
    "ingest": ingest.run,
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    missed = []
    for name in names:
        aims.begin(name)
        if not BENCHMARKS[name]():
            missed.append(name)
    text, all_met = aims.summary()
    print(text)
    if missed or not all_met:
        print(f"aims missed in: {', '.join(missed) or 'see above'}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
