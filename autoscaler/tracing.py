"""Each job's wait as an OpenTelemetry trace, exported over OTLP/HTTP (optional).

With ``telemetry.otlp_endpoint`` set, every job whose wait was split into stages
(:mod:`autoscaler.observe.waits`) becomes one trace: a ``job wait`` span from the job's
creation to its start, and one child span per stage (``github_lag``, ``decision``,
``launch``, ``boot``, ``assignment``), back to back, so the children add up to the parent
and the parent is the job's queue time. Spans carry the runner type, the repository, the
job's id and the pool: nothing else, never a credential.

The SDK's batch processor exports from a thread of its own, so a slow or absent collector
never holds a tick up; spans it cannot send are dropped (counted by the SDK's logs).
Adapters only, and optional: the SDK and exporter come with the ``otel`` extra and are
imported only when an endpoint is configured.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from autoscaler import __version__
from autoscaler.domain import STAGES, JobWait

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from autoscaler.config.schema import TelemetryConfig

#: The parent span's name; each child is named after its stage.
WAIT_SPAN = "job wait"
#: Attribute keys (namespaced, as OpenTelemetry asks of attributes of one's own).
RUNNER_TYPE, REPOSITORY, JOB_ID, POOL, STAGE = (
    "ci_autoscaler.runner_type",
    "ci_autoscaler.repository",
    "ci_autoscaler.job_id",
    "ci_autoscaler.pool",
    "ci_autoscaler.stage",
)
#: Spans kept for export at most (the SDK drops beyond it rather than grow).
QUEUE_SPANS = 4096


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


class WaitTracer:
    """Exports each job's wait as a trace (:meth:`job_waits`); :meth:`close` flushes."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("ci-autoscaler", __version__)

    def job_waits(self, waits: Sequence[JobWait]) -> None:
        """One trace per wait that knows when its job was created and started."""
        from opentelemetry import trace  # noqa: PLC0415 (the extra: imported when used)

        for w in waits:
            created, started = w.created_at, w.started_at
            if created is None or started is None:
                continue
            attributes: dict[str, str | int] = {RUNNER_TYPE: w.runner_type, POOL: w.pool}
            if w.repository:
                attributes[REPOSITORY] = w.repository
            if w.job_id is not None:
                attributes[JOB_ID] = w.job_id
            parent = self._tracer.start_span(
                WAIT_SPAN, start_time=_ns(created), attributes=attributes
            )
            context = trace.set_span_in_context(parent)
            at = created
            for stage, seconds in zip(STAGES, w.stages, strict=True):
                end = at + timedelta(seconds=seconds)
                child = self._tracer.start_span(
                    stage,
                    context=context,
                    start_time=_ns(at),
                    attributes={**attributes, STAGE: stage},
                )
                child.end(end_time=_ns(end))
                at = end
            parent.end(end_time=_ns(max(started, at)))

    def flush(self, timeout: float = 10.0) -> bool:
        """Export what is queued; False when it did not finish within ``timeout``."""
        return self.provider.force_flush(int(timeout * 1000))

    def close(self) -> None:
        self.provider.shutdown()


def build_tracer(config: TelemetryConfig) -> WaitTracer | None:
    """The tracer ``config`` asks for (None: no endpoint). The configuration refused an
    endpoint without the ``otel`` extra at load, so the imports below are there."""
    if config.otlp_endpoint is None:
        return None
    from opentelemetry.exporter.otlp.proto.http import Compression  # noqa: PLC0415
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    # Every setting given here, so no OTEL_* variable of the environment changes them.
    resource = Resource({"service.name": config.service_name, "service.version": __version__})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(
        endpoint=config.otlp_endpoint.reveal(),
        headers={name: value.reveal() for name, value in config.headers.items()},
        timeout=config.timeout,
        compression=Compression.NoCompression,
    )
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=QUEUE_SPANS))
    return WaitTracer(provider)
