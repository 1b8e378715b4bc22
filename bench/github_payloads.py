"""Benchmark: GitHub JSON -> domain values, two ways side by side in one run.

What the poll does with every page it reads (a cold tick of the 1,000-repository org
parses about 50,000 jobs and 10,000 runs): the body's bytes become the domain's ``Job``,
``RunRef`` and ``Runner`` values, malformed items skipped one by one. Measured for

- **hand-written**: ``json.loads`` and field-by-field ``isinstance`` checks (the parser
  the models replaced, kept here as the baseline);
- **msgspec**: the declared models the client ships (:mod:`autoscaler.observe.github.parse`:
  ``msgspec.Struct`` models decoded straight from the body's bytes), through the same
  ``compact_page`` and ``parse_workflow_job`` the poll and the webhook receiver call.

Pages are the fake GitHub's answers (GitHub's documented shapes, every field): queued jobs
in pages of 3 (one run's jobs: the common page) and of 100, running jobs with their steps,
runs (each embeds its repository: ~5 KB an item) and runners, at 1,000 and 10,000 items
(CPU per item is flat in the size: a 50,000-job tick is five times the larger); and
``workflow_job`` webhook bodies one by one. Per cell: items per second (wall) and CPU per
item, the best of :data:`REPEATS`; both must give equal values. Printed, not judged as an
aim: the library was picked by these figures (pydantic, measured the same way, parsed
queued and running jobs slower than the hand-written checks; the docs say so).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.domain import Job, JobStatus, Runner, normalize_labels
from autoscaler.fakes.github import FakeGitHub
from autoscaler.fakes.github_shapes import job_json, run_json, runner_json
from autoscaler.fakes.github_webhooks import workflow_job_payload
from autoscaler.observe.github.parse import Skips, compact_page
from autoscaler.observe.github.records import Interner, RunRef
from autoscaler.observe.github.webhooks import parse_workflow_job
from autoscaler.telemetry import Metrics

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
SIZES = (1000, 10_000)
REPEATS = 3
RUN = RunRef(1, "repo-0000", False, 0.0)
#: The columns: the wave-start baseline, then the shipped models.
WAYS = ("hand-written", "msgspec")
_STATUSES = {s.value: s for s in JobStatus}

# --- hand-written: json.loads and isinstance checks, as the client parsed before


class _Bad(Exception):
    pass


def _field(item: Any, name: str, kind: type) -> Any:
    if not isinstance(item, dict):
        raise _Bad("not an object")
    value = item.get(name)
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise _Bad(name)
    return value


def _time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise _Bad("timestamp")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _Bad("timestamp") from None
    parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    if not 2000 <= parsed.year <= 2999:
        raise _Bad("year")
    return parsed


def _hand_job(item: Any, run: RunRef, interner: Interner) -> Job | None:
    status = _STATUSES.get(_field(item, "status", str))
    job_id = _field(item, "id", int)
    labels = _field(item, "labels", list)
    if not all(isinstance(label, str) for label in labels):
        raise _Bad("labels")
    steps = item.get("steps")
    if steps is not None and not isinstance(steps, list):
        raise _Bad("steps")
    runner = item.get("runner_name")
    if runner is not None and not isinstance(runner, str):
        raise _Bad("runner_name")
    name = item.get("name")
    created = _time(item.get("created_at" if "created_at" in item else "started_at"))
    started = None
    if status not in (None, JobStatus.QUEUED, JobStatus.WAITING) and item.get("started_at"):
        started = _time(item["started_at"])
    if status is None:
        return None
    return Job(
        id=job_id,
        run_id=run.id,
        repo=run.repo,
        name=interner.text(name) if isinstance(name, str) else "",
        labels=interner.labels(normalize_labels(labels)),
        status=status,
        created_at=created,
        started_at=started,
        has_steps=bool(steps),
        run_completed=run.completed,
        runner_name=runner or None,
    )


def _hand_run(item: Any) -> RunRef:
    run_id = _field(item, "id", int)
    status = _field(item, "status", str)
    created = _time(item.get("created_at")).timestamp()
    return RunRef(run_id, RUN.repo, status == "completed", created, status)


def _hand_runner(item: Any, interner: Interner) -> Runner:
    runner_id = _field(item, "id", int)
    name = _field(item, "name", str)
    status = _field(item, "status", str)
    busy = _field(item, "busy", bool)
    names = []
    for label in _field(item, "labels", list):
        text = label.get("name") if isinstance(label, dict) else None
        if not isinstance(text, str):
            raise _Bad("labels")
        names.append(text)
    return Runner(
        runner_id, name, interner.labels(normalize_labels(names)), status == "online", busy
    )


def hand_page(kind: str, content: bytes, interner: Interner) -> list[Any]:
    body = json.loads(content)
    out = []
    for item in body[kind]:
        try:
            if kind == "jobs":
                value: Any = _hand_job(item, RUN, interner)
            elif kind == "workflow_runs":
                value = _hand_run(item)
            else:
                value = _hand_runner(item, interner)
        except _Bad:
            continue
        if value is not None:
            out.append(value)
    return out


# --- shipped: the msgspec models (autoscaler.observe.github.parse)

_SHIPPED_KINDS = {"jobs": "jobs", "workflow_runs": "runs", "runners": "runners"}


def shipped_page(kind: str, content: bytes, interner: Interner, skips: Skips) -> list[Any]:
    return list(
        compact_page(_SHIPPED_KINDS[kind], content, skips, interner, RUN.repo, run=RUN).items
    )


# --- the pages


def pages(size: int) -> dict[str, list[bytes]]:
    """Bodies of ``size`` items per listing, as the fake GitHub renders them."""
    fake = FakeGitHub(clock=lambda: T0)
    fake.add_repo(RUN.repo)
    labels = ["self-hosted", "linux.4xlarge"]
    queued = [
        fake.queue_job(RUN.repo, labels, created_at=T0 - timedelta(seconds=i)) for i in range(size)
    ]
    runners = [fake.register_runner(f"r-{i}", labels) for i in range(size)]
    running = [fake.queue_job(RUN.repo, labels, created_at=T0) for _ in range(size)]
    for job, runner in zip(running, runners, strict=True):
        fake.assign_job(job, runner)
    later = T0 + timedelta(minutes=3)
    base, owner = "https://api.github.com", fake.owner
    state = fake

    def jobs(ids: list[int]) -> list[dict[str, Any]]:
        return [job_json(base, owner, state.job(i), later) for i in ids]

    runs = [run_json(base, owner, state._runs[state.job(i).run_id], "queued") for i in queued]
    runner_items = [runner_json(state._runners[r]) for r in runners]

    def paged(key: str, items: list[dict[str, Any]], per: int) -> list[bytes]:
        return [
            json.dumps({"total_count": len(items), key: items[i : i + per]}).encode()
            for i in range(0, len(items), per)
        ]

    return {
        "queued jobs, pages of 3": paged("jobs", jobs(queued), 3),
        "queued jobs, pages of 100": paged("jobs", jobs(queued), 100),
        "running jobs with steps, 100": paged("jobs", jobs(running), 100),
        "runs, pages of 100": paged("workflow_runs", runs, 100),
        "runners, pages of 100": paged("runners", runner_items, 100),
    }


def _kind(body: bytes) -> str:
    head = body[:60]
    return next(k for k in ("jobs", "workflow_runs", "runners") if f'"{k}"'.encode() in head)


def measure(fn: Callable[[], int]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, items out), the best of REPEATS."""
    best = (float("inf"), float("inf"), 0)
    for _ in range(REPEATS):
        cpu, wall = time.process_time(), time.perf_counter()
        count = fn()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        best = min(best, (wall, cpu, count))
    return best


def _counting(fn: Callable[[], Iterable[Any]]) -> Callable[[], int]:
    return lambda: len(list(fn()))


def _ways(bodies: list[bytes]) -> dict[str, Callable[[], Iterable[Any]]]:
    kind = _kind(bodies[0]) if bodies else "jobs"
    skips = Skips(Metrics())

    def run(page: Callable[[bytes, Interner], list[Any]]) -> Callable[[], list[Any]]:
        def go() -> list[Any]:
            interner = Interner()
            return [v for body in bodies for v in page(body, interner)]

        return go

    return {
        "hand-written": run(lambda b, i: hand_page(kind, b, i)),
        "msgspec": run(lambda b, i: shipped_page(kind, b, i, skips)),
    }


def webhook_bodies(size: int) -> list[bytes]:
    fake = FakeGitHub(clock=lambda: T0)
    ids = [fake.queue_job(RUN.repo, ["self-hosted", "gpu"], created_at=T0) for _ in range(size)]
    return [json.dumps(workflow_job_payload(fake, i, "queued")).encode() for i in ids]


def run() -> bool:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"github_payloads: GitHub JSON -> domain values, best of {REPEATS}; items/s (wall) and "
        f"CPU us/item; ratio = hand-written CPU / this CPU (load {load}, {os.cpu_count()} CPUs)"
    )
    rows = [["listing", "items", "hand-written", "msgspec (shipped)"]]
    ok = True
    for size in SIZES:
        for name, bodies in pages(size).items():
            ways = _ways(bodies)
            results: dict[str, tuple[float, float, int]] = {}
            values: dict[str, list[Any]] = {}
            for way, fn in ways.items():
                values[way] = list(fn())
                results[way] = measure(_counting(fn))
            print(f"  measured {name} x {size:,}", file=sys.stderr, flush=True)
            same = values["hand-written"] == values["msgspec"]
            ok = ok and same and len(values["msgspec"]) == size
            base_cpu = results["hand-written"][1]
            row = [name, f"{size:,}"]
            for way in WAYS:
                wall, cpu, count = results[way]
                row.append(f"{count / wall:,.0f}/s {1e6 * cpu / count:.1f}us x{base_cpu / cpu:.2f}")
            rows.append(row + ([] if same else ["VALUES DIFFER"]))
    bodies = webhook_bodies(SIZES[0])

    def hand_hooks() -> int:
        count = 0
        for body in bodies:
            item = json.loads(body)["workflow_job"]
            count += _hand_job(item, RUN, Interner()) is not None
        return count

    hooks: dict[str, Callable[[], int]] = {
        "hand-written": hand_hooks,
        "msgspec": lambda: len([parse_workflow_job(b, "d") for b in bodies]),
    }
    timed = {way: measure(fn) for way, fn in hooks.items()}
    base_cpu = timed["hand-written"][1]
    rows.append(
        ["workflow_job webhook bodies", f"{len(bodies):,}"]
        + [
            f"{n / w:,.0f}/s {1e6 * c / n:.1f}us x{base_cpu / c:.2f}"
            for w, c, n in (timed[k] for k in WAYS)
        ]
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for line in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)))
    if not ok:
        print("  the two ways did not give the same values")
    sys.stdout.flush()
    return ok
