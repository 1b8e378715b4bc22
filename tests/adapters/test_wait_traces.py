"""Each job's wait as an OpenTelemetry trace, received by a real OTLP/HTTP endpoint on
127.0.0.1 that decodes the protobuf the exporter sends (OTLP's own messages): one parent
span for the wait, one child per stage, back to back, adding up to the job's queue time;
attributes runner type, repository, job id and pool, and never a secret."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from autoscaler.controller import Controller
from autoscaler.domain import STAGES, JobWait
from autoscaler.observe.waits import wait_stages
from autoscaler.tracing import (
    JOB_ID,
    POOL,
    REPOSITORY,
    RUNNER_TYPE,
    STAGE,
    WAIT_SPAN,
    WaitTracer,
    build_tracer,
)
from tests.factories import load_config

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POLL = 30.0
GITHUB_TOKEN = "ghp_notarealtoken0123456789abcdefghijkl"
HEADER_SECRET = "Bearer otlp-key-do-not-leak"
URL_PASSWORD = "url-password-do-not-leak"


class Receiver:
    """An OTLP/HTTP traces endpoint: every request's body, headers and decoded spans."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.requests: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.bodies.append(body)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1/traces"

    def spans(self) -> list[Span]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def resource_attributes(self) -> dict[str, str]:
        [request, *_] = self.requests
        [resource] = request.resource_spans
        return {a.key: a.value.string_value for a in resource.resource.attributes}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def a_wait(job_id: int = 4242, repository: str = "my-org/app") -> JobWait:
    """A gpu job created at T0, first seen by a poll at +25 s, capacity asked at +26 s,
    the instance running at +40 s, its runner seen online (next poll) at +130 s, the job
    started at +134 s."""
    stages = wait_stages(T0, at(25), at(26), at(40), at(130), at(134))
    return JobWait(
        "gpu",
        stages,
        started_at=at(134),
        created_at=T0,
        pool="ci-gpu-od",
        repository=repository,
        job_id=job_id,
    )


def tracer_for(url: str, **telemetry: Any) -> WaitTracer:
    config = load_config(telemetry={"otlp_endpoint": url, **telemetry})
    tracer = build_tracer(config.telemetry)
    assert tracer is not None
    return tracer


def attributes(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in span.attributes:
        kind = a.value.WhichOneof("value")
        out[a.key] = getattr(a.value, kind)
    return out


def test_one_trace_per_job_a_child_per_stage(receiver: Receiver) -> None:
    tracer = tracer_for(receiver.url)
    tracer.job_waits([a_wait(), a_wait(job_id=4243)])
    assert tracer.flush()
    tracer.close()
    spans = receiver.spans()
    parents = [s for s in spans if s.name == WAIT_SPAN]
    assert len(parents) == 2 and len(spans) == 2 * (1 + len(STAGES))
    assert len({p.trace_id for p in parents}) == 2, "one trace per job"
    for parent in parents:
        assert parent.parent_span_id == b""
        children = sorted(
            (s for s in spans if s.parent_span_id == parent.span_id),
            key=lambda s: s.start_time_unix_nano,
        )
        assert [c.name for c in children] == list(STAGES)
        assert {c.trace_id for c in children} == {parent.trace_id}
        # back to back, from the job's creation to its start
        assert children[0].start_time_unix_nano == parent.start_time_unix_nano
        for before, after in pairwise(children):
            assert before.end_time_unix_nano == after.start_time_unix_nano
        assert children[-1].end_time_unix_nano == parent.end_time_unix_nano
        seconds = {c.name: (c.end_time_unix_nano - c.start_time_unix_nano) / 1e9 for c in children}
        assert seconds == {
            "github_lag": 25.0,
            "decision": 1.0,
            "launch": 14.0,
            "boot": 90.0,
            "assignment": 4.0,
        }
        queue_time = 134.0  # started - created, as GitHub reports them
        total = (parent.end_time_unix_nano - parent.start_time_unix_nano) / 1e9
        assert abs(total - queue_time) <= POLL
        assert abs(sum(seconds.values()) - queue_time) <= POLL
        assert parent.start_time_unix_nano == int(T0.timestamp() * 1e9)
        assert attributes(parent) == {
            RUNNER_TYPE: "gpu",
            POOL: "ci-gpu-od",
            REPOSITORY: "my-org/app",
            JOB_ID: attributes(parent)[JOB_ID],
        }
        for c in children:
            assert attributes(c) == {**attributes(parent), STAGE: c.name}
    assert sorted(attributes(p)[JOB_ID] for p in parents) == [4242, 4243]
    assert receiver.resource_attributes()["service.name"] == "ci-autoscaler"


def test_no_secret_reaches_a_span(receiver: Receiver) -> None:
    """The GitHub token, the collector's header and a password in the endpoint's URL are in
    the configuration; none of them is in what is exported (the header goes to the
    collector as a header, which is what it is for)."""
    url = receiver.url.replace("http://", f"http://otel:{URL_PASSWORD}@")
    config = load_config(
        github={"owner": "my-org", "token": GITHUB_TOKEN},
        telemetry={"otlp_endpoint": url, "headers": {"X-Collector-Key": HEADER_SECRET}},
    )
    tracer = build_tracer(config.telemetry)
    assert tracer is not None
    tracer.job_waits([a_wait()])
    assert tracer.flush()
    tracer.close()
    assert receiver.bodies
    for body in receiver.bodies:
        for secret in (GITHUB_TOKEN, HEADER_SECRET, URL_PASSWORD, "otlp-key"):
            assert secret.encode() not in body
    assert receiver.headers[0]["x-collector-key"] == HEADER_SECRET
    allowed = {RUNNER_TYPE, POOL, REPOSITORY, JOB_ID, STAGE}
    assert all(set(attributes(s)) <= allowed for s in receiver.spans())
    assert GITHUB_TOKEN not in repr(config.telemetry) and URL_PASSWORD not in repr(config)


def test_a_wait_without_its_times_is_not_traced(receiver: Receiver) -> None:
    tracer = tracer_for(receiver.url)
    tracer.job_waits([JobWait("gpu", (1.0, 2.0, 3.0, 4.0, 5.0))])
    assert tracer.flush()
    tracer.close()
    assert receiver.spans() == []


def test_no_endpoint_no_tracer() -> None:
    assert build_tracer(load_config().telemetry) is None


def test_the_controller_hands_each_tick_s_waits_to_the_tracer() -> None:
    """Wired: a configured endpoint gives the controller a tracer (closed with it)."""
    from autoscaler.app.wiring import build_runtime  # noqa: PLC0415
    from autoscaler.telemetry import Metrics  # noqa: PLC0415

    config = load_config(telemetry={"otlp_endpoint": "http://127.0.0.1:9/v1/traces"})
    runtime = build_runtime(config, Metrics())
    try:
        assert isinstance(runtime.controller, Controller)
        assert isinstance(runtime.controller.tracer, WaitTracer)
    finally:
        runtime.close()


def test_an_endpoint_without_the_otel_extra_is_refused_at_load() -> None:
    """A Python without the SDK (a subprocess where importing ``opentelemetry`` fails):
    the configuration names the extra to install, as check-config reports it."""
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from tests.factories import config_doc, config_problems\n"
        "doc = config_doc(telemetry={'otlp_endpoint': 'http://127.0.0.1:4318/v1/traces'})\n"
        "print(config_problems(doc))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "telemetry.otlp_endpoint: traces need the OpenTelemetry SDK" in done.stdout
    assert "pip install 'ci-autoscaler[otel]'" in done.stdout
