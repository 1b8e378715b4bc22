"""What the demo shows: one function per panel, the story's running totals, the summary.

A screen is the panels in order (:func:`screen`); each panel is a function of plain data
returning lines, so a new panel is one function (:func:`causes_panel`: why jobs wait, as
``explain`` says it). :class:`Story` accumulates what happened across ticks (jobs, waits,
scale actions read back from the controller's own metrics, alert notifications the
webhook sink received, the cause codes named) and :meth:`Story.summary` checks it
against the README's promises.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from autoscaler.app.explain import reports
from autoscaler.app.report import _fmt_age, _plain, align
from autoscaler.config import Config
from autoscaler.controller import TickResult
from autoscaler.domain import STAGES
from autoscaler.sim.fleet import FleetEvents


@dataclass(frozen=True)
class Notice:
    """One notification the webhook sink received."""

    t: float
    """Seconds into the demo."""
    state: str
    title: str
    fingerprint: str
    cause: str = ""
    """The text of the alert's ``Cause:`` line ("" when it has none)."""

    @property
    def line(self) -> str:
        """``FIRING: [P2] title | Cause: ...``: one line as the sink received it."""
        return f"{self.state}: {self.title}" + (f" | Cause: {self.cause}" if self.cause else "")


@dataclass(frozen=True)
class AlertLine:
    """One alert (a fingerprint) over the demo: when it fired and resolved, how often."""

    title: str
    fired_at: float
    resolved_at: float | None
    firings: int
    cause: str = ""
    """The Cause line of its latest FIRING."""
    first_resolved_at: float | None = None
    """When it first resolved: it fired and later resolved, whatever came after."""


def alert_history(notices: Iterable[Notice]) -> list[AlertLine]:
    """Per alert, in the order each first fired: a FIRING is never scrolled away."""
    lines: dict[str, AlertLine] = {}
    for n in notices:
        line = lines.get(n.fingerprint)
        if n.state == "FIRING":
            if line is None:
                lines[n.fingerprint] = AlertLine(n.title, n.t, None, 1, n.cause)
            else:
                lines[n.fingerprint] = AlertLine(
                    line.title,
                    line.fired_at,
                    None,
                    line.firings + 1,
                    n.cause,
                    line.first_resolved_at,
                )
        elif n.state == "RESOLVED" and line is not None:
            first = line.first_resolved_at if line.first_resolved_at is not None else n.t
            lines[n.fingerprint] = AlertLine(
                line.title, line.fired_at, n.t, line.firings, line.cause, first
            )
    return list(lines.values())


def metric_total(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include ``labels`` (counters: ``_total``)."""
    total = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def median(values: Sequence[float]) -> float | None:
    """The median, or None when there is nothing to rank."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def p95(values: Sequence[float]) -> float | None:
    """Nearest-rank 95th percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


SHOWN_CAUSES = ("capacity_backoff", "at_max", "no_runner_type")
"""Cause codes the demo's script brings about: spot out of capacity, CPU types at their
``max``, jobs asking for a label nobody serves."""


@dataclass
class Story:
    """Running totals of the demo, updated once per tick."""

    jobs_started: int = 0
    jobs_finished: int = 0
    waits: list[float] = field(default_factory=list)
    peak_queued: int = 0
    drained_at: float | None = None
    """When every queue was first empty again after jobs had queued (the script repeats:
    queues rise again later, which does not undo a drain that happened)."""
    scale_ups: int = 0
    scale_ins: int = 0
    orphans: int = 0
    failovers: int = 0
    runners_retired: int = 0
    busy_killed: int = 0
    notices: list[Notice] = field(default_factory=list)
    causes_seen: set[str] = field(default_factory=set)
    """Every cause code the controller named while jobs waited (``explain``'s causes)."""
    reactions: list[float] = field(default_factory=list)
    """Seconds from each queued webhook to the scale-up it caused (reaction_seconds)."""
    load_average: float | None = None
    """The machine's 1-minute load average at the end (the webhook promise's caveat)."""

    def update(  # noqa: PLR0917 - one tick's worth of inputs
        self,
        t: float,
        result: TickResult,
        events: FleetEvents,
        registry: CollectorRegistry,
        busy_killed: int,
        notices: Sequence[Notice],
    ) -> None:
        self.jobs_started += len(events.assigned)
        self.jobs_finished += len(events.completed)
        self.waits.extend(events.waited)
        self.runners_retired += len(events.deregistered)
        queued = 0
        if result.snapshot is not None:
            queued = sum(s.queue_size for s in result.snapshot.per_type.values())
        self.peak_queued = max(self.peak_queued, queued)
        if self.peak_queued and queued == 0 and self.drained_at is None:
            self.drained_at = t
        actions = "ci_autoscaler_scale_actions_total"
        self.scale_ups = int(metric_total(registry, actions, action="scale_up"))
        self.scale_ins = int(metric_total(registry, actions, action="scale_in"))
        self.orphans = int(metric_total(registry, actions, action="terminate_orphan"))
        self.failovers = int(metric_total(registry, "ci_autoscaler_pool_failovers_total"))
        self.busy_killed = busy_killed
        self.notices = list(notices)
        self.causes_seen |= {c.code for found in result.causes.values() for c in found}

    @property
    def fired(self) -> int:
        return sum(1 for n in self.notices if n.state == "FIRING")

    @property
    def resolved(self) -> int:
        return sum(1 for n in self.notices if n.state == "RESOLVED")

    def alert_counts(self) -> str:
        """Alerts, not notifications: "6 fired" beside "4 of 4 alerts" did not add up when
        one alert fired three times. The notifications are named when they differ."""
        history = alert_history(self.notices)
        resolved = sum(1 for a in history if a.first_resolved_at is not None)
        text = f"{len(history)} fired, {resolved} resolved"
        if (self.fired, self.resolved) != (len(history), resolved):
            text += (
                f" ({self.fired} FIRING and {self.resolved} RESOLVED notifications:"
                " an alert that fires again is sent again)"
            )
        return text

    def promises(self) -> list[tuple[bool, str]]:
        """The README's first paragraph, each with whether this run showed it, judged from
        what happened during the run, not from how it ended (the script repeats, so a
        run that stops mid-burst has queues and firing alerts again)."""
        history = alert_history(self.notices)
        return [
            (self.peak_queued > 0, f"queues rose (peak {self.peak_queued} jobs queued)"),
            (self.scale_ups > 0, f"pools grew ({self.scale_ups} scale-ups)"),
            (
                self.drained_at is not None,
                "queues drained"
                + (f" (all empty at t={self.drained_at:.0f}s)" if self.drained_at else ""),
            ),
            (self.scale_ins > 0, f"idle runners scaled in ({plural(self.scale_ins, 'scale-in')})"),
            self._alert_promise(history),
            (
                self.failovers > 0,
                f"GPU spot out of capacity -> on-demand ({plural(self.failovers, 'failover')})",
            ),
            (self.busy_killed == 0, f"no busy runner killed ({self.busy_killed} killed)"),
            (
                all(code in self.causes_seen for code in SHOWN_CAUSES),
                "why jobs wait named (" + ", ".join(SHOWN_CAUSES) + ")",
            ),
            (bool(self.reactions), self._webhook_promise()),
        ]

    def _alert_promise(self, history: Sequence[AlertLine]) -> tuple[bool, str]:
        """Each alert fired and later resolved. An alert that first fired after the queues
        had drained fired in a later burst, which the run may cut short: it is named
        apart, not held against the promise."""
        round_trip = sum(1 for a in history if a.first_resolved_at is not None)
        drained = self.drained_at
        late = [
            a
            for a in history
            if a.first_resolved_at is None and drained is not None and a.fired_at > drained
        ]
        ok = round_trip > 0 and round_trip + len(late) == len(history)
        text = f"alerts FIRING then RESOLVED ({round_trip} of {len(history) - len(late)} alerts"
        if late:
            first = min(a.fired_at for a in late)
            text += (
                f"; {len(late)} more first fired at t={first:.0f}s, in a burst the run cut short"
            )
        return ok, text + ")"

    def _webhook_promise(self) -> str:
        """Within a second on an idle machine; on a busy one the time is what it is, and
        the line says why instead of failing the promise."""
        fast = p95(self.reactions)
        if fast is None:
            return "queued webhooks answered within a second"
        if fast < 1.0:
            return f"queued webhooks answered within a second (p95 {fast:.2f}s)"
        load = "" if self.load_average is None else f", load average {self.load_average:.1f}"
        return (
            f"queued webhooks answered by a scale-up (p95 {fast:.2f}s: within a second on "
            f"an idle machine; this one is busy{load})"
        )

    def summary(self, elapsed: float) -> list[str]:
        wait = p95(self.waits)
        lines = [
            f"summary after {elapsed:.0f}s",
            f"  jobs run: {self.jobs_finished} finished ({self.jobs_started} started); "
            f"p95 queue time: {'-' if wait is None else f'{wait:.1f}s'}",
            f"  scale-ups: {self.scale_ups}; scale-ins: {self.scale_ins}; "
            f"orphans cleaned: {self.orphans}; failovers: {self.failovers}",
            f"  alerts: {self.alert_counts()}; busy runners killed: {self.busy_killed}",
            f"  webhooks: {len(self.reactions)} queued jobs answered by a scale-up; queued "
            f"event -> capacity asked p50 {_seconds(median(self.reactions))}, "
            f"p95 {_seconds(p95(self.reactions))}",
            "  promises shown:",
        ]
        lines.extend(f"    [{'x' if ok else ' '}] {text}" for ok, text in self.promises())
        return lines


# --- panels: each returns lines ----------------------------------------------------------


def header_panel(t: float, base_url: str, phase: str) -> list[str]:
    return [
        f"ci-autoscaler demo  t={t:5.1f}s  {phase}",
        f"status page: {base_url}/  metrics: {base_url}/metrics  (Ctrl-C stops)",
    ]


def queue_panel(result: TickResult) -> list[str]:
    """Per runner type: the queue and the runners serving it."""
    snap = result.snapshot
    rows = [["RUNNER TYPE", "QUEUED", "MAX WAIT", "IDLE", "BUSY", "OFFLINE"]]
    if snap is not None:
        for name, s in snap.per_type.items():
            r = s.runners
            rows.append(
                [
                    name,
                    str(s.queue_size),
                    _fmt_age(s.max_queue_time_seconds),
                    *map(str, (r.idle, r.busy, r.offline)),
                ]
            )
        oldest = snap.unmatched_ages_seconds[0] if snap.unmatched_ages_seconds else 0.0
        rows.append(["(unmatched)", str(snap.unmatched_jobs), _fmt_age(oldest), "", "", ""])
    lines = align(rows, right={1, 2, 3, 4, 5}).splitlines()
    if result.poll_error:
        lines.append(f"poll failed: {result.poll_error} (showing the last good picture)")
    if result.poll_partial:
        lines.append(f"poll partial: {result.poll_partial}")
    return lines


def pools_panel(result: TickResult, instances: Mapping[str, int]) -> list[str]:
    """Per pool: the instances it has (in service or booting) and the desired capacity
    the controller left it at this tick, with the action and why."""
    rows = [["POOL", "INSTANCES", "DESIRED", "ACTION", "WHY"]]
    for d in (_plain(d) for d in result.decisions):
        pool = str(d.get("pool"))
        rows.append(
            [
                pool,
                str(instances.get(pool, 0)),
                str(d.get("desired")),
                str(d.get("action")),
                str(d.get("reason")),
            ]
        )
    return align(rows, right={1, 2}).splitlines()


def causes_panel(result: TickResult, config: Config, width: int = 160) -> list[str]:
    """Why jobs wait, per runner type with a queue: the same causes as ``explain``, the
    page at ``/`` and the alerts' Cause line (one line each, cut to ``width``)."""
    lines = ["why jobs wait (explain):"]
    for t in reports(result, config):
        if not t.queue_size:
            continue
        lines.append(f"  {t.name}: {t.queue_size} queued")
        lines.extend(_cut(f"    {c.code}: {c.detail}", width) for c in t.causes or ())
    return lines if len(lines) > 1 else [*lines, "  (no queue)"]


def activity_panel(story: Story, events: FleetEvents) -> list[str]:
    """This tick's fleet events, then the totals so far."""
    return [
        f"this tick: +{len(events.registered)} runners booted, {len(events.assigned)} jobs "
        f"started, {len(events.completed)} finished, {len(events.deregistered)} runners "
        "removed by scale-in",
        f"so far: {story.jobs_finished} jobs run; scale-ups {story.scale_ups}, scale-ins "
        f"{story.scale_ins}, failovers {story.failovers}; busy runners killed: "
        f"{story.busy_killed}",
    ]


def alerts_panel(notices: Sequence[Notice]) -> list[str]:
    """Every alert of the run, first FIRING first, with its RESOLVED when it came."""
    history = alert_history(notices)
    if not history:
        return ["alerts (as the webhook sink received them): none yet"]
    lines = ["alerts (as the webhook sink received them):"]
    for a in history:
        state = (
            f"FIRING t={a.fired_at:.0f}s -> RESOLVED t={a.resolved_at:.0f}s"
            if a.resolved_at is not None
            else f"FIRING since t={a.fired_at:.0f}s"
        )
        again = f" (fired {a.firings}x)" if a.firings > 1 else ""
        lines.append(f"  {state:<34} {a.title}{again}")
        if a.cause:
            lines.append(f"  {'':<34} | Cause: {a.cause}")
    return lines


def log_panel(records: Sequence[str]) -> list[str]:
    """The controller's last log lines (scale actions, warnings): kept on screen instead
    of flashing on stderr between redraws."""
    return ["controller log:", *(f"  {r}" for r in records or ["(nothing yet)"])]


def _cut(line: str, width: int) -> str:
    """``line`` at most ``width`` long, a cut one ending in "..." (a detail cut mid-word,
    "Could not launch S", read as the whole message)."""
    return line if len(line) <= width else line[: width - 3] + "..."


def screen(panels: Sequence[Sequence[str]], width: int | None = None) -> str:
    """Panels separated by a blank line; lines cut to ``width`` (a terminal that wraps
    would scroll the redraw)."""
    lines: list[str] = []
    for panel in panels:
        if lines:
            lines.append("")
        lines.extend(panel)
    if width:
        lines = [_cut(line, width) for line in lines]
    return "\n".join(lines) + "\n"


def notice_from_payload(t: float, doc: Mapping[str, Any]) -> Notice:
    """A webhook receiver's JSON (autoscaler.alerting.render.webhook_payload) as a Notice,
    with the text's ``Cause:`` line when it has one."""
    cause = next(
        (
            ln[len("Cause: ") :]
            for ln in str(doc.get("text", "")).splitlines()
            if ln[:7] == "Cause: "
        ),
        "",
    )
    return Notice(
        t, str(doc.get("state")), str(doc.get("title")), str(doc.get("fingerprint")), cause
    )


def stage_series(registry: CollectorRegistry) -> str:
    """What /metrics holds of ``ci_autoscaler_job_wait_stage_seconds``: the stages with an
    observation, per runner type (read back from the registry the page serves)."""
    stages: dict[str, set[str]] = {}
    for family in registry.collect():
        if family.name != "ci_autoscaler_job_wait_stage_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_count") and sample.value > 0:
                labels = sample.labels
                stages.setdefault(labels["runner_type"], set()).add(labels["stage"])
    full = sorted(t for t, s in stages.items() if len(s) == len(STAGES))
    return (
        f"/metrics: ci_autoscaler_job_wait_stage_seconds has all {len(STAGES)} stages for "
        f"{len(full)} runner type(s){': ' + ', '.join(full) if full else ''}"
    )
