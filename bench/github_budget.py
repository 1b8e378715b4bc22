"""Benchmark: the GitHub rate limit as a budget, over one hour of a busy org.

200 repositories, 1,000 queued jobs (most repositories have queued runs), 30 runner types,
300 runners of which half run a job whose steps move on every tick: listing everything
every 30 s would cost far more than a 5,000/h token. The controller ticks every 30 s of a
virtual clock for an hour (120 ticks; the fake answers at once) while the org churns
(jobs start, complete and queue). Measured by the fake: the requests that counted against
its primary rate limit in that hour (the cold first tick included), side by side with what
the same org costs without a budget (a few ticks against an unlimited fake, the steady
ones scaled to an hour: every unit re-listed every 30 s).

Aim (the exit code says whether it is met): counted requests per hour under
``rate_limit_share`` (0.8) of 5,000; and no 403 from the primary limit. The table also says
what that costs: such an org needs far more than a 5,000/h token (the built-in alert
says so), so part of its queue is seen late.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

from bench import aims
from bench.github_poll import Proc
from bench.org import T0, Size

SIZE = Size(200, 1000, 30, 300)
LIMIT = 5000
SHARE = 0.8
INTERVAL = 30.0
TICKS = 120
#: Ticks without a rate limit, to measure what polling everything every 30 s costs.
UNLIMITED_TICKS = 6


def ticks(limit: int, count: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``count`` ticks 30 s apart against a fake with this rate limit: the controller's
    answers and the fake's final stats."""
    fake = Proc("fake", {"size": asdict(SIZE), "latency": 0.0, "rate_limit": limit})
    controller: Proc | None = None
    answers = []
    try:
        where = fake.read()
        controller = Proc(
            "controller",
            {
                "size": asdict(SIZE),
                "url": where["url"],
                "owner": where["owner"],
                "interval": INTERVAL,
                "concurrency": 16,
                "virtual_sleep": True,
            },
        )
        now = T0.timestamp()
        for tick in range(count):
            if tick:
                fake.ask(op="churn", seconds=INTERVAL)
            answers.append(controller.ask(op="tick", t=now))
            now += INTERVAL
        return answers, fake.ask(op="stats")
    finally:
        if controller is not None:
            controller.close()
        fake.close()


def _counted(answer: dict[str, Any]) -> int:
    return sum(n for status, n in answer["statuses"].items() if status != "304")


def run() -> bool:
    unlimited, _ = ticks(1_000_000_000, UNLIMITED_TICKS)
    steady = [_counted(a) for a in unlimited[1:]]
    without = sum(steady) / len(steady) * 3600 / INTERVAL
    answers, stats = ticks(LIMIT, TICKS)
    counted = stats["rate_used"]
    forbidden = sum(a["statuses"].get("403", 0) for a in answers)
    failed = sum(1 for a in answers if a["poll_error"])
    busy = sorted({a["busy_interval"] for a in answers[1:] if a["busy_interval"]})
    alerting = sum(1 for a in answers if a["too_small"])
    requests = sum(sum(a["statuses"].values()) for a in answers)
    seen = answers[-1]["queued"]
    checks = {
        "budget": aims.count(
            f"counted in the hour < {SHARE * LIMIT:,.0f}", counted < SHARE * LIMIT
        ),
        "403": aims.count("no 403 from the primary limit", forbidden == 0),
    }
    rows = [
        (
            "counted against the primary limit in the hour",
            f"{counted:,}",
            f"< {SHARE * LIMIT:,.0f}",
            "ok" if checks["budget"] else "MISSED",
        ),
        ("without a budget: counted per hour (steady ticks x 120)", f"{without:,.0f}", "", ""),
        ("requests sent in the hour (304s included)", f"{requests:,}", "", ""),
        ("403 from the primary limit", str(forbidden), "0", "ok" if checks["403"] else "MISSED"),
        ("polls failed", str(failed), "", ""),
        ("busy-repository intervals used (s)", ", ".join(f"{b:.0f}" for b in busy), "", ""),
        ("ticks with 'GitHub budget too small'", f"{alerting} of {TICKS}", "", ""),
        ("queued jobs seen at the last tick", f"{seen:,} of {SIZE.jobs:,}", "", ""),
    ]
    print(
        f"github_budget: {SIZE.label} (repos/queued jobs/types/runners), a {LIMIT:,}/h token, "
        f"rate_limit_share {SHARE}, one hour of {INTERVAL:.0f} s ticks"
    )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    sys.stdout.flush()
    return all(checks.values())
