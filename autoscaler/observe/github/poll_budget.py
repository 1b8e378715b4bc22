"""The budget side of a poll: what it may spend, what it planned, and what it says.

:class:`~autoscaler.observe.github.poll.Poll` decides what to list and assembles the
answers; this keeps what lives *between* its polls for GitHub's rate limit: the token
bucket (:func:`~autoscaler.observe.github.budget.refill`: what this poll may spend, the
budget per hour paced over the interval) and whether the "budget too small" warning was
said (once when it starts, once when it ends), and puts the plan on ``/metrics``
(``github_poll_interval_seconds{kind}``, ``github_budget_requests_per_hour``...) and in
the log.
"""

from __future__ import annotations

import logging

from autoscaler.domain import PollBudget
from autoscaler.observe.github.budget import BudgetPlan, Limits, plan_budget, refill
from autoscaler.observe.github.cadence import QUIET_TICKS, STALE_TICKS, Cadence
from autoscaler.observe.github.fetch import Allowance, Fetcher, Settings
from autoscaler.observe.github.units import PollState
from autoscaler.telemetry import Metrics

log = logging.getLogger("autoscaler.observe.github")


class PollBudgetKeeper:
    """The token bucket and the "too small" state of one source's polls."""

    def __init__(self, metrics: Metrics, settings: Settings, fetch: Fetcher) -> None:
        self.metrics = metrics
        self.settings = settings
        self.fetch = fetch
        #: The token bucket (None: full, before the first poll) and when it was.
        self.tokens: float | None = None
        self.tokens_at = 0.0
        self.too_small = False

    def plan(
        self, state: PollState, limits: Limits, now: float, start: int, *, cadence: bool
    ) -> tuple[BudgetPlan, float, Allowance]:
        """The plan for a poll at ``now`` from the limits known now, the tokens it holds
        and its allowance (``start``: the helper's counted requests when it began);
        ``cadence``: quiet units are listed at the cadence's shares of the ticks."""
        s = self.settings
        quiet, stale = (1 / QUIET_TICKS, 1 / STALE_TICKS) if cadence else (1.0, 1.0)
        plan = plan_budget(
            state.activity(repo_list=s.repos is None, quiet_share=quiet, stale_share=stale),
            state.runner_list.cost,
            limits,
            now,
            s.poll_interval,
            s.share,
        )
        tokens = refill(
            self.tokens, now - self.tokens_at, limits, now, s.poll_interval, s.share, s.concurrency
        )
        return plan, tokens, Allowance(start, tokens)

    def settle(self, tokens: float, allowance: Allowance, now: float) -> None:
        """What the poll spent leaves the bucket."""
        self.tokens, self.tokens_at = tokens - self.fetch.spent(allowance), now

    def report(
        self,
        plan: BudgetPlan,
        cad: Cadence | None,
        allowance: Allowance,
        deferred: int,
        busy_deferred: bool,
    ) -> None:
        """The plan on /metrics and in the log; "too small" said once, when it starts.
        ``cad``: the cadence of a poll alone (None: the webhook reconcile)."""
        m = self.metrics
        m.github_poll_interval.labels("busy").set(plan.busy_interval)
        m.github_poll_interval.labels("quiet").set(
            plan.quiet_interval if cad is None else cad.quiet
        )
        if cad is not None:
            m.github_staleness_limit.set(cad.staleness)
        m.github_budget.set(plan.budget_per_hour)
        m.github_budget_needed.set(plan.needed_per_hour)
        spent = self.fetch.spent(allowance)
        if deferred:
            log.info(
                "GitHub budget: %d of %.0f requests spent this tick; %d listings deferred",
                spent,
                allowance.requests,
                deferred,
            )
        too_small = plan.too_small or busy_deferred
        if too_small and not self.too_small and plan.too_small:
            log.warning(
                "GitHub budget too small for this org: re-listing repositories with queued "
                "jobs every %.0fs needs ~%.0f requests/h, the budget is %.0f/h "
                "(github.rate_limit_share of the rate limit); they are re-listed every "
                "%.0fs or later instead. Webhooks (or a GitHub App's higher limit) fix this.",
                plan.poll_interval,
                plan.needed_per_hour,
                plan.budget_per_hour,
                plan.busy_interval,
            )
        elif too_small and not self.too_small:
            # The plan fitted (on what re-listing has cost so far: nothing is known at a
            # cold start), but this poll's allowance ran out before every listing of a
            # repository with queued jobs was sent. Its estimate of the need would mislead.
            log.warning(
                "GitHub budget too small for this org: this poll's allowance (%.0f requests "
                "of a %.0f/h budget, github.rate_limit_share of the rate limit) ran out "
                "before %d listings, some of repositories with queued jobs; they wait for a "
                "later poll. Webhooks (or a GitHub App's higher limit) fix this.",
                allowance.requests,
                plan.budget_per_hour,
                deferred,
            )
        elif not too_small and self.too_small:
            log.info("GitHub budget fits again: busy repositories every %.0fs", plan.poll_interval)
        self.too_small = too_small
        log.debug(
            "GitHub budget %.0f/h, needed %.0f/h, planned %.0f/h; busy every %.0fs, quiet "
            "every %.0fs; this tick may spend %.0f, spent %d",
            plan.budget_per_hour,
            plan.needed_per_hour,
            plan.planned_per_hour,
            plan.busy_interval,
            plan.quiet_interval,
            allowance.requests,
            spent,
        )


def poll_budget(
    plan: BudgetPlan, busy_deferred: bool, cad: Cadence | None, live: int, quiet: int
) -> PollBudget:
    """The plan as the observation carries it (the "budget too small" alert reads it, and
    ``explain`` says the cadence): ``live`` and ``quiet`` repositories after this poll."""
    return PollBudget(
        poll_interval=plan.poll_interval,
        busy_interval=plan.busy_interval,
        quiet_interval=plan.quiet_interval if cad is None else cad.quiet,
        budget_per_hour=plan.budget_per_hour,
        needed_per_hour=plan.needed_per_hour,
        too_small=plan.too_small or busy_deferred,
        staleness_limit=None if cad is None else cad.staleness,
        live_repos=live,
        quiet_repos=quiet,
    )
