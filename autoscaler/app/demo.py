"""``ci-autoscaler demo``: the whole world on 127.0.0.1, no credentials, no network.

A fake GitHub with a scripted workload over CPU and GPU runner types; moto's server with
an Auto Scaling group per pool; a fleet emulator that turns launched instances into
runners after a boot delay and runs queued jobs on them; a local webhook sink that
receives the alerts. The real controller (GitHub adapter, alerting, scaler, AWS adapter)
runs against all of it and serves ``/metrics`` and the status page at ``/``.

The script repeats every :data:`CYCLE` seconds, so the default 60 s shows each promise of
the README once: a burst of jobs (queues rise, pools grow, alerts fire), the GPU spot pool
running out of capacity :data:`CAPACITY_FAULT_AT` seconds in (accepted scale-ups that
launch nothing, with a Failed scaling activity, as real AWS reports it) so GPU demand fails
over to on-demand (a rush of GPU jobs then waits on on-demand alone, so the GPU queue
alert fires with ``Cause: capacity_backoff``), then calm (queues drain, alerts resolve,
idle runners are scaled in), and no busy runner is ever killed. A panel says why jobs
wait (the causes ``explain`` gives), each alert shows its Cause line, the fake GitHub
sends signed ``workflow_job`` webhooks so a queued job is answered by a scale-up within a
second (not at the next poll), and a closing summary counts it all
(:mod:`autoscaler.app.demo_screen` draws the panels).

On a terminal the screen is redrawn each tick; piped, a full screen is printed every
:data:`SCREEN_EVERY` seconds and one line per tick in between. Log lines go to a panel,
not between redraws (``--log-level`` sends them to stderr as well).

The world the script runs against (runner types, pools, the config, the fakes) is in
:mod:`autoscaler.app.demo_world`.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from autoscaler.app import demo_screen as ui
from autoscaler.app.demo_world import (
    BURST,
    CYCLE,
    WORLD,
    demo_world,
)
from autoscaler.app.explain import format_waits
from autoscaler.app.logs import redact
from autoscaler.app.served import StatusServer, WebhookServer
from autoscaler.app.service import stop_on_signals
from autoscaler.fakes.github import FakeGitHub

log = logging.getLogger(__name__)


CANCEL_UNMATCHED_AT = BURST + 6.0
"""Seconds into each cycle when someone cancels the jobs no runner type serves (so the
built-in alert about them resolves too)."""
CAPACITY_FAULT_AT = 2.0
"""The GPU spot pool runs out of capacity (for good) at the first tick this many seconds
in at which it has launched an instance: it worked, then it stops, whatever the load of
the machine running the demo."""
GPU_RUSH = ((0.0, 2), (4.0, 6))
"""(seconds after the outage began, GPU jobs), once: spot is asked and fails, then a rush
waits on the on-demand pool alone, so the GPU queue alert fires with
``Cause: capacity_backoff`` naming the pool and AWS's message."""
SCREEN_EVERY = 10.0
"""Piped output: seconds between full screens."""


class _LogLines(logging.Handler):
    """Keeps the last log lines for the screen's log panel, stamped with demo time."""

    def __init__(self, clock: Callable[[], float], keep: int = 5) -> None:
        super().__init__(logging.INFO)
        self.clock = clock
        self.lines: deque[str] = deque(maxlen=keep)
        self.seen = 0

    def filter(self, record: logging.LogRecord) -> bool:
        story = record.name.startswith(("autoscaler.scale", __name__))
        return record.levelno >= logging.WARNING or story

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"t={self.clock():5.1f}s {record.levelname} {record.getMessage()}")
        self.seen += 1


@contextmanager
def _logs_on_screen(clock: Callable[[], float], also_stderr: bool) -> Iterator[_LogLines]:
    """Route log records to the screen's panel for the demo's duration; restore after."""
    root, scale, demo = (logging.getLogger(n) for n in ("", "autoscaler.scale", __name__))
    saved = (list(root.handlers), root.level, scale.level, demo.level)
    panel = _LogLines(clock)
    root.handlers = [*(saved[0] if also_stderr else []), panel]
    redact(root)
    if not also_stderr:
        root.setLevel(logging.WARNING)
    scale.setLevel(logging.INFO)  # scale actions are the story
    demo.setLevel(logging.INFO)
    for noisy in ("werkzeug", "botocore", "urllib3"):  # moto's server and boto's wiring
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        yield panel
    finally:
        root.handlers = saved[0]
        root.setLevel(saved[1])
        scale.setLevel(saved[2])
        demo.setLevel(saved[3])


def _phase(t: float, outage_at: float | None) -> str:
    when = t % CYCLE
    text = "burst: jobs arriving" if when < BURST else "calm: no new jobs, queues drain"
    if outage_at is not None:
        text += f"; ci-gpu-spot out of capacity since t={outage_at:.0f}s (injected)"
    return text


def _tick_lines(t: float, result: Any, fleet: Any, events: Any, new: list[str]) -> str:
    """Piped output between full screens: one line per tick, then what happened in it
    (alert notifications, the controller's scale actions and warnings), one per line."""
    snap = result.snapshot
    queued = sum(s.queue_size for s in snap.per_type.values()) if snap else 0
    lines = [
        f"t={t:5.1f}s  queued {queued:3d}  instances {sum(fleet.live_instances.values()):3d}"
        f"  +{len(events.registered)} booted, {len(events.assigned)} started, "
        f"{len(events.completed)} finished, {len(events.deregistered)} scaled in"
    ]
    lines.extend(f"           {line}" for line in new)
    return "\n".join(lines) + "\n"


def _cancel_unmatched(github: FakeGitHub) -> None:
    """Someone fixes the workflow that asked for a runner nobody has: its jobs go."""
    from autoscaler.sim.workload import UNMATCHED_LABELS  # noqa: PLC0415

    stuck = [j.id for j in github.queued_jobs() if tuple(j.labels) == UNMATCHED_LABELS]
    for job_id in stuck:
        github.complete_job(job_id)
    if stuck:
        log.info("demo: %d jobs no runner type serves were cancelled (labels fixed)", len(stuck))


def _say(line: str) -> None:
    """A start-up line, before the first screen (the start takes seconds)."""
    print(line, flush=True)


def run_demo(
    duration: float | None, listen: str, tick: float = 2.0, *, log_to_stderr: bool = False
) -> int:
    """Run the demo until ``duration`` seconds pass or SIGINT/SIGTERM; 1 if a busy
    runner was ever killed."""
    _say("starting the demo: everything on 127.0.0.1, no credentials ...")
    try:
        import moto  # noqa: F401, PLC0415
    except ImportError:
        print("the demo needs moto: pip install 'ci-autoscaler[demo]'", file=sys.stderr)
        return 1
    import boto3  # noqa: PLC0415

    from autoscaler.app.wiring import build_runtime  # noqa: PLC0415
    from autoscaler.scale.aws.asg import AwsAsgPool  # noqa: PLC0415
    from autoscaler.scale.aws.ssm import SsmParameters  # noqa: PLC0415
    from autoscaler.sim.aws_faults import CapacityOutage  # noqa: PLC0415
    from autoscaler.telemetry import Metrics  # noqa: PLC0415

    stop = threading.Event()
    stop_on_signals(stop)
    started = time.monotonic()

    def clock() -> float:
        return time.monotonic() - started

    tty = sys.stdout.isatty()
    story = ui.Story()
    with (
        _logs_on_screen(clock, log_to_stderr) as logs,
        demo_world(tick, clock, _say) as (config, github, (workload, _asg), fleet, sink),
    ):
        _say("starting the controller ...")
        metrics = Metrics()
        session = boto3.session.Session(
            aws_access_key_id="demo",
            aws_secret_access_key="demo",  # noqa: S106 - moto accepts any credentials
            region_name="us-east-1",
        )
        pool = AwsAsgPool(config.aws, metrics, session=session)
        ssm = SsmParameters(config.aws, metrics, session=session)
        runtime = build_runtime(config, metrics, pool=pool, parameters=ssm, webhooks=True)
        hooks = runtime.webhooks
        listener = None
        if hooks is not None:  # the fake GitHub delivers signed webhooks to the controller
            listener = WebhookServer(hooks.receiver, metrics, "127.0.0.1", 0)
            listener.start()
            github.send_webhooks(
                f"http://127.0.0.1:{listener.port}/github/webhook",
                hooks.config.secret.reveal().encode(),
            )
        host, _, port = listen.rpartition(":")
        try:
            server = StatusServer(runtime.controller, metrics, host, int(port))
        except OSError:
            server = StatusServer(runtime.controller, metrics, host or "127.0.0.1", 0)
        server.start()
        base_url = f"http://{host or '127.0.0.1'}:{server.port}"
        _say(f"ready: the status page is {base_url}/")
        started = time.monotonic()  # the story starts now, the world is up
        outage: CapacityOutage | None = None
        outage_at: float | None = None
        rush: list[tuple[float, int]] = []
        last_screen, seen_notices, seen_logs, cancelled = -SCREEN_EVERY, 0, 0, -1
        try:
            while not stop.is_set():
                t = clock()
                if duration is not None and t >= duration:
                    break
                spot_up = fleet.live_instances.get("ci-gpu-spot", 0) > 0
                if outage is None and t >= CAPACITY_FAULT_AT and spot_up:
                    outage = CapacityOutage("ci-gpu-spot").install(pool.autoscaling)
                    outage_at = t
                    rush = [(t + after, jobs) for after, jobs in GPU_RUSH]
                    log.info("demo: ci-gpu-spot is out of capacity from now on (injected)")
                if t % CYCLE >= CANCEL_UNMATCHED_AT and cancelled != t // CYCLE:
                    cancelled = int(t // CYCLE)
                    _cancel_unmatched(github)
                now = datetime.now(UTC)
                while rush and t >= rush[0][0]:  # GPU jobs while spot is out
                    workload.burst(WORLD[2][1], rush.pop(0)[1], now)
                workload.step(now)
                events = fleet.tick(now)
                result = runtime.controller.tick(now)
                if hooks is not None:
                    story.reactions.extend(hooks.reactions.after_tick(result))
                notices = list(sink.notices)
                story.update(t, result, events, metrics.registry, fleet.busy_terminations, notices)
                panels = [
                    ui.header_panel(t, base_url, _phase(t, outage_at)),
                    ui.queue_panel(result),
                    ui.pools_panel(result, fleet.live_instances),
                    ui.causes_panel(result, config),
                    ui.activity_panel(story, events),
                    ui.alerts_panel(notices),
                    ui.log_panel(list(logs.lines)),
                ]
                if tty:
                    width = shutil.get_terminal_size().columns
                    sys.stdout.write("\x1b[H\x1b[2J" + ui.screen(panels, width))
                elif t - last_screen >= SCREEN_EVERY:
                    last_screen = t
                    sys.stdout.write(ui.screen(panels) + "-" * 72 + "\n")
                else:
                    new = [n.line for n in notices[seen_notices:]]
                    fresh = min(logs.seen - seen_logs, len(logs.lines))
                    new += list(logs.lines)[len(logs.lines) - fresh :]
                    sys.stdout.write(_tick_lines(t, result, fleet, events, new))
                seen_notices, seen_logs = len(notices), logs.seen
                sys.stdout.flush()
                left = max(0.0, tick - (clock() - t))
                if hooks is None:
                    stop.wait(left)
                else:  # a queued webhook ends the wait at once (debounced)
                    hooks.wake.wait(left, stop)
        finally:
            if github.webhooks is not None:
                github.webhooks.close()
            if listener is not None:
                listener.stop()
            server.stop()
            runtime.close()
        story.load_average = os.getloadavg()[0]
        waits = format_waits(list(runtime.controller.waits.summary().values()))
        waits.append(ui.stage_series(metrics.registry))
        sys.stdout.write("\n" + "\n".join([*story.summary(clock()), *waits]) + "\n")
        sys.stdout.flush()
    return 0 if fleet.busy_terminations == 0 else 1
