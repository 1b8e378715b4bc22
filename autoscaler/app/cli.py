"""Argument parsing and wiring only. Standard output carries results; logs go to stderr.

A command imports what it runs when it runs (the controller, the served application,
the simulator, the config's models, the AWS and HTTP clients): ``--help`` and a parse
error import argparse and this module only, and ``check-config`` the config's models.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from autoscaler import __version__

if TYPE_CHECKING:
    from autoscaler.config import Config, LoadedConfig
    from autoscaler.controller import TickResult

#: Exit codes, one meaning each (docs: getting-started.md, "Exit codes").
OK = 0
#: The config is invalid, or what the command checked failed (a receiver refused the test).
FAILED = 1
#: A usage error: argparse's own code, and an argument that names nothing configured.
USAGE = 2
#: The CI provider (GitHub) could not be read.
CI_UNREADABLE = 3
#: The cloud (the pools) could not be read.
CLOUD_UNREADABLE = 4
#: The environment variable ``--config`` defaults to.
CONFIG_ENV = "CI_AUTOSCALER_CONFIG"


def plural(count: int, noun: str) -> str:
    """``1 problem``, ``2 problems``, ``0 alert rules``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _read(path: str, *, allow_unset_env: bool = False) -> LoadedConfig | None:
    from autoscaler.config import read_config  # noqa: PLC0415 (pydantic: only to read one)
    from autoscaler.errors import ConfigError  # noqa: PLC0415

    try:
        return read_config(path, allow_unset_env=allow_unset_env)
    except ConfigError as exc:
        print(f"{path}: {plural(len(exc.problems), 'problem')}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def _load(path: str) -> Config | None:
    loaded = _read(path)
    return None if loaded is None else loaded.config


def _configure(args: argparse.Namespace) -> Config | None:
    """Load ``--config`` (problems to stderr) and set up logging from it."""
    from autoscaler.app.logs import setup_logging  # noqa: PLC0415

    config = _load(args.config)
    if config is not None:
        setup_logging(args.log_level or config.log_level)
    return config


def cmd_check_config(args: argparse.Namespace) -> int:
    path = args.config_option or args.file or os.environ.get(CONFIG_ENV) or None
    if path is None:
        print(f"check-config: give the file: --config FILE (or set {CONFIG_ENV})", file=sys.stderr)
        return USAGE
    if args.output == "json":
        return _check_config_json(path, args.allow_unset_env)
    loaded = _read(path, allow_unset_env=args.allow_unset_env)
    if loaded is None:
        return FAILED
    for warning in loaded.warnings:
        print(f"{path}: warning: {warning} (allowed by --allow-unset-env)", file=sys.stderr)
    config = loaded.config
    counts = ", ".join(
        (
            plural(len(config.runner_types), "runner type"),
            plural(len(config.alerts.rules), "alert rule"),
            plural(len(config.alerts.receivers), "receiver"),
        )
    )
    print(f"{path}: ok ({counts})")
    return OK


def _check_config_json(path: str, allow_unset_env: bool) -> int:
    """One JSON object on stdout, valid or not (as ``terraform validate -json``)."""
    import json  # noqa: PLC0415

    from autoscaler.config import read_config  # noqa: PLC0415 (pydantic: only to read one)
    from autoscaler.errors import ConfigError  # noqa: PLC0415

    report: dict[str, object] = {"file": path}
    try:
        loaded = read_config(path, allow_unset_env=allow_unset_env)
    except ConfigError as exc:
        report |= {"valid": False, "problems": list(exc.problems), "warnings": []}
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return FAILED
    config = loaded.config
    report |= {
        "valid": True,
        "problems": [],
        "warnings": list(loaded.warnings),
        "runner_types": len(config.runner_types),
        "alert_rules": len(config.alerts.rules),
        "receivers": len(config.alerts.receivers),
    }
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return OK


def tick_exit_code(result: TickResult) -> int:
    """What a tick read: 0, or which side could not be read (GitHub first)."""
    if result.poll_error is not None:
        return CI_UNREADABLE
    if result.scaling is not None and result.scaling.plan is None:
        return CLOUD_UNREADABLE
    return OK


def cmd_config_schema(args: argparse.Namespace) -> int:
    import json  # noqa: PLC0415

    from autoscaler.config import json_schema  # noqa: PLC0415 (pydantic: only for this)

    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")
    return 0


def cmd_once(args: argparse.Namespace) -> int:
    import json  # noqa: PLC0415

    from autoscaler.app.report import format_table, to_json  # noqa: PLC0415
    from autoscaler.app.service import utc_now  # noqa: PLC0415
    from autoscaler.app.wiring import build_runtime  # noqa: PLC0415
    from autoscaler.telemetry import Metrics  # noqa: PLC0415

    config = _configure(args)
    if config is None:
        return 1
    runtime = build_runtime(config, Metrics(), dry_run=args.dry_run)
    try:
        if runtime.keeper is not None and not args.dry_run:
            runtime.keeper.step()  # take the lease if nobody holds it; released at close
            if not runtime.controller.acting():
                holder = runtime.keeper.lease.holder
                who = holder.owner if holder is not None and holder.owner else "nobody"
                print(
                    f"not the leader ({who} holds the lease on {config.state.table}): "
                    "this tick changes nothing and sends nothing",
                    file=sys.stderr,
                )
        result = runtime.controller.tick(utc_now(), dry_run=args.dry_run)
    finally:
        runtime.close()
    if args.output == "json":
        sys.stdout.write(json.dumps(to_json(result), indent=2) + "\n")
    else:
        sys.stdout.write(format_table(result))
    return tick_exit_code(result)


def cmd_explain(args: argparse.Namespace) -> int:
    import json  # noqa: PLC0415

    from autoscaler.app.explain import explain_json, format_explain, reports  # noqa: PLC0415
    from autoscaler.app.service import utc_now  # noqa: PLC0415
    from autoscaler.app.wiring import build_runtime  # noqa: PLC0415
    from autoscaler.telemetry import Metrics  # noqa: PLC0415

    config = _configure(args)
    if config is None:
        return 1
    names = [rt.name for rt in config.runner_types]
    if args.runner_type is not None and args.runner_type not in names:
        print(
            f"unknown runner type {args.runner_type!r} (configured: {', '.join(names)})",
            file=sys.stderr,
        )
        return USAGE
    runtime = build_runtime(config, Metrics(), dry_run=True)
    try:
        result = runtime.controller.tick(utc_now(), dry_run=True)
        last_poll = runtime.controller.last_successful_poll
        observation = runtime.controller.last_observation
        budget = observation.budget if observation is not None else None
    finally:
        runtime.close()
    types = [t for t in reports(result, config) if args.runner_type in (None, t.name)]
    if args.output == "json":
        sys.stdout.write(json.dumps(explain_json(types, result.retries, budget), indent=2) + "\n")
    else:
        sys.stdout.write(format_explain(types, result, last_poll, budget))
    return tick_exit_code(result)


def cmd_run(args: argparse.Namespace) -> int:
    import logging  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from autoscaler.app.served import StatusServer  # noqa: PLC0415
    from autoscaler.app.service import Wakeup, run_loop, stop_on_signals  # noqa: PLC0415
    from autoscaler.app.wiring import build_runtime  # noqa: PLC0415
    from autoscaler.telemetry import Metrics  # noqa: PLC0415

    log = logging.getLogger("autoscaler")

    config = _configure(args)
    if config is None:
        return 1
    metrics = Metrics()
    runtime = build_runtime(config, metrics, webhooks=True)
    controller = runtime.controller
    try:
        server = StatusServer(controller, metrics, config.listen_host, config.listen_port)
    except OSError as exc:  # the port is taken or not ours: say so, not a traceback
        print(
            f"{args.config}: listen: cannot serve /metrics on "
            f"{config.listen_host}:{config.listen_port}: {exc.strerror or exc} "
            "(is another ci-autoscaler running? stop it, or set listen to a free port)",
            file=sys.stderr,
        )
        runtime.close()
        return 1
    server.start()
    hooks = runtime.webhooks
    listener = None
    if hooks is not None:
        from autoscaler.app.served import WebhookServer  # noqa: PLC0415

        try:
            listener = WebhookServer(
                hooks.receiver,
                metrics,
                hooks.config.listen_host,
                hooks.config.listen_port,
                # Both serve (the ALB's health check passes on both): a delivery to a
                # follower is written to the shared job index the leader reads.
            )
        except OSError as exc:  # the port is taken or not ours: say so, not a traceback
            log.error(
                "cannot listen for webhooks on %s:%d: %s (webhook.listen in %s: set a free port)",
                hooks.config.listen_host,
                hooks.config.listen_port,
                exc.strerror or exc,
                args.config,
            )
            server.stop()
            runtime.close()
            return 1
        listener.start()
    stop = threading.Event()
    # One wake-up for the loop: a new leader and a stop set it at once, a queued webhook
    # notifies it (debounced).
    wake: threading.Event | Wakeup = threading.Event() if hooks is None else hooks.wake
    stop_on_signals(stop, wake)
    if runtime.keeper is not None:
        runtime.keeper.on_acquired = wake.set  # a new leader acts at once
        runtime.keeper.start()
    if hooks is not None and hooks.watcher is not None:
        hooks.watcher.start()  # the leader ticks at once for a follower's queued delivery
    log.info(
        "ci-autoscaler %s watching %s every %gs%s",
        __version__,
        config.github.owner,
        config.poll_interval,
        ""
        if hooks is None
        else f" (webhooks; reconcile every {hooks.config.reconcile_interval:g}s)",
    )
    try:
        run_loop(
            controller,
            config.poll_interval,
            stop,
            wake=wake,
            on_tick=None if hooks is None else hooks.on_tick(controller),
            due_in=None if hooks is None else hooks.source.due_in,
        )
    finally:
        if listener is not None:
            listener.stop()
        if hooks is not None and hooks.watcher is not None:
            hooks.watcher.stop()
        server.stop()
        runtime.close()
        log.info("stopped")
    return 0


def cmd_state_create_table(args: argparse.Namespace) -> int:
    from autoscaler.errors import StateError, StateUnavailableError  # noqa: PLC0415
    from autoscaler.state.dynamodb_table import DynamoTable, create_table  # noqa: PLC0415
    from autoscaler.telemetry import Metrics  # noqa: PLC0415

    config = _configure(args)
    if config is None:
        return 1
    from autoscaler.config import DYNAMODB  # noqa: PLC0415 (with the config, loaded above)

    if config.state.backend != DYNAMODB:
        print(
            f"{args.config}: state.backend is {config.state.backend}: there is no table to "
            "create (set state.backend: dynamodb and state.table)",
            file=sys.stderr,
        )
        return 1
    table = DynamoTable(config.aws, config.state.table, Metrics())
    try:
        outcome = create_table(table)
    except StateError as exc:
        # The table's own messages are written for the running controller ("the
        # controller's role needs GetItem, ...", "retried at the next step"); a person
        # creating the table once needs other words. By the error's type and code.
        if exc.code == "permission":
            print(
                f"{args.config}: cannot create {table.path}: no AWS credentials were found, "
                "or they may not create it. Creating it needs dynamodb:CreateTable, "
                "DescribeTable, DescribeTimeToLive, UpdateTimeToLive and "
                "UpdateContinuousBackups: run this with such credentials (AWS_PROFILE, "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or let terraform create it "
                "(state_table_name)",
                file=sys.stderr,
            )
        elif isinstance(exc, StateUnavailableError):
            print(
                f"{args.config}: cannot create {table.path}: DynamoDB did not answer "
                f"({exc.code}). Check aws.region and aws.endpoint_url, and the network; "
                "run it again once DynamoDB answers (safe to repeat: a table already "
                "there is checked, not made again)",
                file=sys.stderr,
            )
        else:
            print(f"{args.config}: {exc}", file=sys.stderr)
        return 1
    what = "created" if outcome == "created" else "already exists with the expected schema"
    print(f"{table.path}: {what} (on-demand, TTL on expires_at, point-in-time recovery)")
    return 0


def cmd_alerts_test(args: argparse.Namespace) -> int:
    import json  # noqa: PLC0415
    import time  # noqa: PLC0415

    from autoscaler.alerting.alertmanager import ALERTMANAGER, api_urls  # noqa: PLC0415
    from autoscaler.alerting.alertmanager_check import confirm  # noqa: PLC0415
    from autoscaler.alerting.delivery import Deliverer  # noqa: PLC0415
    from autoscaler.alerting.engine import send_test  # noqa: PLC0415
    from autoscaler.alerting.evaluation import Evaluation  # noqa: PLC0415
    from autoscaler.app.service import utc_now  # noqa: PLC0415
    from autoscaler.telemetry import Metrics  # noqa: PLC0415

    config = _configure(args)
    if config is None:
        return FAILED
    receiver = config.alerts.receivers.get(args.receiver)
    if receiver is None:
        known = ", ".join(sorted(config.alerts.receivers)) or "none"
        print(f"unknown receiver {args.receiver!r} (configured: {known})", file=sys.stderr)
        return USAGE
    missing: list[str] = []

    def read_back(ev: Evaluation) -> dict[str, str]:
        """Alertmanager: wait out group_wait, then find the alert in /api/v2/alerts."""
        if args.output != "json":
            print(f"{args.receiver}: FIRING: sent; waiting out group_wait ...", flush=True)
        found = confirm(
            api_urls(receiver),
            ev.alertname,
            ev.fingerprint,
            sleep=time.sleep,
            timeout=receiver.timeout,
        )
        missing.extend(r.url for r in found if r.state == "missing")
        return {f"received {i}": r.line() for i, r in enumerate(found, 1)}

    deliverer = Deliverer.from_config(config, Metrics())
    try:
        between = read_back if receiver.type == ALERTMANAGER else None
        results = send_test(receiver, utc_now(), deliverer, between)
    finally:
        deliverer.close()
    if args.output == "json":
        report = {"receiver": args.receiver, "type": receiver.type, "results": results}
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        for state, outcome in results.items():
            print(f"{args.receiver}: {state}: {outcome}")
    sent = all(results[s] == "sent" for s in ("FIRING", "RESOLVED") if s in results)
    return OK if sent and not missing and "RESOLVED" in results else FAILED


def cmd_demo(args: argparse.Namespace) -> int:
    from autoscaler.app.demo import run_demo  # noqa: PLC0415
    from autoscaler.app.logs import setup_logging  # noqa: PLC0415

    if args.log_level:  # asked for: to stderr as well as the demo's log panel
        setup_logging(args.log_level)
    return run_demo(
        duration=args.duration,
        listen=args.listen,
        tick=args.tick,
        log_to_stderr=args.log_level is not None,
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    from autoscaler.app.simulation import run_simulate  # noqa: PLC0415

    config = _configure(args)
    if config is None:
        return 1
    sweep = [item for group in args.sweep or [] for item in group]
    return run_simulate(
        config,
        args.trace,
        args.policy,
        args.output,
        args.plot,
        sweep,
        equal_knobs=args.equal_knobs,
    )


def cmd_record(args: argparse.Namespace) -> int:
    from autoscaler.app.record import run_record  # noqa: PLC0415
    from autoscaler.app.service import utc_now  # noqa: PLC0415

    config = _configure(args)
    if config is None:
        return 1
    return run_record(config, args.since, args.out, args.max_requests, utc_now())


def _positive_seconds(text: str) -> float:
    """An argparse type: seconds, more than zero (``--tick 0`` ended in a traceback)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def _host_port(text: str) -> str:
    """An argparse type: ``HOST:PORT`` with a port in 0-65535 (``abc`` ended in a
    traceback from int(), ``:99999`` in one from bind())."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    return f"{host}:{int(port)}"


class _Policies:
    """The simulator's policy names as argparse ``choices``, read from the simulator only
    when a ``--policy`` is checked or ``simulate --help`` lists them: building the parser
    (for every command, and ``--help``) does not import the simulator."""

    def _names(self) -> tuple[str, ...]:
        from autoscaler.sim.simulate import POLICIES  # noqa: PLC0415

        return POLICIES

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()


CONFIG_HELP = (
    "the YAML config file (start from config.example.yaml; check it with check-config); "
    f"default: ${CONFIG_ENV}"
)


def _config_argument(p: argparse.ArgumentParser, dest: str = "config") -> None:
    """``--config FILE``, required unless ``CI_AUTOSCALER_CONFIG`` names the file."""
    default = os.environ.get(CONFIG_ENV) or None
    p.add_argument(
        "--config", dest=dest, default=default, required=default is None, help=CONFIG_HELP
    )


def _output_argument(p: argparse.ArgumentParser) -> None:
    """``-o/--output table|json``, as every command that prints a report takes it."""
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="table for a person (default), json for a script: one object on stdout",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ci-autoscaler",
        description="Watch GitHub Actions queues per runner type, alert, and scale runner pools.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _log_level_option(parser, default=None)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("check-config", help="validate a config file (exit 0 valid, 1 not)")
    p.add_argument(
        "file", nargs="?", default=None, help="the YAML config file (the same as --config)"
    )
    p.add_argument(
        "--config", dest="config_option", metavar="CONFIG", default=None, help=CONFIG_HELP
    )
    p.add_argument(
        "--allow-unset-env",
        action="store_true",
        help="report an unset ${VAR} as a warning, not a problem (check a file on a machine "
        "without the deployment's secrets)",
    )
    _output_argument(p)
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser("config", help="configuration tools")
    config_sub = p.add_subparsers(dest="config_command", required=True)
    p = config_sub.add_parser(
        "schema",
        help="print the config file's JSON Schema (for editors: config.schema.json)",
    )
    p.set_defaults(func=cmd_config_schema)

    p = sub.add_parser("once", help="run one tick and print what it saw and did")
    _config_argument(p)
    _output_argument(p)
    p.add_argument("--dry-run", action="store_true", help="deliver nothing, change nothing")
    p.set_defaults(func=cmd_once)

    p = sub.add_parser(
        "explain", help="one dry-run tick: why jobs wait, per runner type (pools, causes)"
    )
    p.add_argument(
        "runner_type",
        nargs="?",
        default=None,
        metavar="RUNNER_TYPE",
        help="one runner type (a key of runner_types); default: every one",
    )
    _config_argument(p)
    _output_argument(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("run", help="the loop, serving /metrics, /healthz and /readyz")
    _config_argument(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("state", help="the state backend")
    state_sub = p.add_subparsers(dest="state_command", required=True)
    p = state_sub.add_parser(
        "create-table",
        help="create the DynamoDB state table (state.table) as the terraform module does",
    )
    _config_argument(p)
    p.set_defaults(func=cmd_state_create_table)

    p = sub.add_parser("alerts", help="alerting tools")
    alerts_sub = p.add_subparsers(dest="alerts_command", required=True)
    p = alerts_sub.add_parser("test", help="send a sample FIRING then RESOLVED to a receiver")
    p.add_argument("receiver", help="a receiver's name under alerts.receivers")
    _config_argument(p)
    _output_argument(p)
    p.set_defaults(func=cmd_alerts_test)

    p = sub.add_parser("demo", help="a self-contained demo: no credentials, no network")
    p.add_argument(
        "--duration", type=_positive_seconds, default=None, help="stop after this many seconds"
    )
    p.add_argument(
        "--listen",
        type=_host_port,
        default="127.0.0.1:9464",
        help="HOST:PORT for the page and /metrics (taken: a free port is used and shown)",
    )
    p.add_argument(
        "--tick", type=_positive_seconds, default=2.0, help="seconds between ticks (default 2)"
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "simulate", help="replay a job trace through this policy and the peers' (virtual time)"
    )
    _config_argument(p)
    p.add_argument("--trace", required=True, help="JSON lines: created_at, labels, duration")
    p.add_argument(
        "--policy",
        action="append",
        choices=_Policies(),
        metavar="POLICY",
        help="a policy to replay (repeatable; default: all of them; an unknown name lists them)",
    )
    _output_argument(p)
    p.add_argument("--plot", metavar="FILE", help="draw the results (needs matplotlib)")
    p.add_argument(
        "--sweep",
        action="append",
        nargs="+",
        metavar="KNOB=V1,V2",
        help="this project's knobs over a grid (min_idle, idle_timeout, ...): the Pareto front",
    )
    p.add_argument(
        "--equal-knobs",
        action="store_true",
        help="give the peers this project's poll interval, idle timeout and min_idle"
        " wherever they have such a knob (rule against rule)",
    )
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("record", help="write a trace of the owner's completed jobs")
    _config_argument(p)
    p.add_argument("--since", default="7d", help="7d, 36h, or an ISO date/time (UTC)")
    p.add_argument("--out", required=True, help="the trace file ('-': standard output)")
    p.add_argument(
        "--max-requests",
        type=int,
        default=1000,
        help="GitHub requests to spend at most (the hourly limit is shared with the controller)",
    )
    p.set_defaults(func=cmd_record)
    _everywhere(parser)
    return parser


def _log_level_option(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=default,
        help="log lines to stderr from this level (default: the config's log_level, info)",
    )


def _everywhere(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` after the command too: ``once --log-level debug --config X`` was
    refused as an unrecognized argument, which is where a person puts it. SUPPRESS keeps
    a value given before the command when it is not given again after it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if not any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
                    _log_level_option(child, default=argparse.SUPPRESS)
                _everywhere(child)


def main(argv: Sequence[str] | None = None) -> int:
    """The command. The console script and ``python -m autoscaler`` reach it through
    :func:`autoscaler.app.entry.main`, which turns a Ctrl-C at any moment (importing this
    module, parsing, loading the config, the first tick) into one line and exit 130."""
    args = build_parser().parse_args(argv)
    code = args.func(args)
    assert isinstance(code, int)
    return code
