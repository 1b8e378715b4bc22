"""Benchmark: the GitHub rate limit as a budget, over one hour of a busy org.

200 repositories, 1,000 queued jobs (most repositories have queued runs), 30 runner types,
300 runners of which half run a job whose steps move on every tick: listing everything
every 30 s would cost far more than a 5,000/h token. The controller ticks every 30 s of a
virtual clock for an hour (120 ticks; the fake answers at once) while the org churns
(jobs start, complete and queue). Measured by the fake: the requests that counted against
its primary rate limit in that hour (the cold first tick included), side by side with
what re-listing everything every tick would cost (the plan's ``needed``).

Aim (the exit code says whether it is met): counted requests per hour under
``rate_limit_share`` (0.8) of 5,000; and no 403 from the primary limit. The table also says
what that costs: such an org needs far more than a 5,000/h token (the built-in alert
says so), so part of its queue is seen late.
"""

from __future__ import annotations

import sys
from dataclasses import asdict

from bench.github_poll import Proc
from bench.org import T0, Size

SIZE = Size(200, 1000, 30, 300)
LIMIT = 5000
SHARE = 0.8
INTERVAL = 30.0
TICKS = 120


def run() -> bool:
    fake = Proc("fake", {"size": asdict(SIZE), "latency": 0.0, "rate_limit": LIMIT})
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
        for tick in range(TICKS):
            if tick:
                fake.ask(op="churn", seconds=INTERVAL)
            answers.append(controller.ask(op="tick", t=now))
            now += INTERVAL
        stats = fake.ask(op="stats")
    finally:
        if controller is not None:
            controller.close()
        fake.close()
    counted = stats["rate_used"]
    forbidden = sum(a["statuses"].get("403", 0) for a in answers)
    failed = sum(1 for a in answers if a["poll_error"])
    needed = max(a["needed_per_hour"] or 0 for a in answers[1:])
    busy = sorted({a["busy_interval"] for a in answers[1:] if a["busy_interval"]})
    alerting = sum(1 for a in answers if a["too_small"])
    requests = sum(sum(a["statuses"].values()) for a in answers)
    seen = answers[-1]["queued"]
    checks = {"budget": counted < SHARE * LIMIT, "403": forbidden == 0}
    rows = [
        (
            "counted against the primary limit in the hour",
            f"{counted:,}",
            f"< {SHARE * LIMIT:,.0f}",
            "ok" if checks["budget"] else "MISSED",
        ),
        ("re-listing everything every 30 s would cost (/h)", f"{needed:,.0f}", "", ""),
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
