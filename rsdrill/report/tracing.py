"""A run as an OpenTelemetry trace: one span for the run, a child per phase and one per fault
(from its injection to its revert), with the fault's fields and the measured figures as
attributes, exported by OTLP over HTTP as the standard `OTEL_*` variables say.

A plugin of the run's events (rsdrill/hooks.py), on when `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not true) and the
`tracing` extra is installed; the SDK is imported only then.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsdrill.hooks import hookimpl

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span

    from rsdrill.history import FaultRecord, Op, RunClock
    from rsdrill.result import Result

_log = logging.getLogger("rsdrill.tracing")
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces."""
    disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    return not disabled and any(environ.get(name) for name in ENDPOINT_VARIABLES)


class RunTracer:
    """Spans of one run; every event is a span starting or ending."""

    def __init__(self, clock: Callable[[], RunClock | None], provider: TracerProvider) -> None:
        self._clock = clock
        self._provider = provider
        self._tracer = provider.get_tracer("rsdrill")
        self._run: Span | None = None
        self._phase: Span | None = None
        self._faults: dict[int, Span] = {}

    @classmethod
    def from_environment(cls, clock: Callable[[], RunClock | None]) -> RunTracer | None:
        """A tracer exporting by OTLP/HTTP as `OTEL_*` says; None (said once) without the SDK."""
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            _log.warning("tracing: OTEL_EXPORTER_OTLP_ENDPOINT is set, but the OpenTelemetry "
                         "SDK is not installed: pip install 'rsdrill[tracing]'")  # fmt: skip
            return None
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME",
                                                                   "rsdrill")})  # fmt: skip
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(clock, provider)

    @hookimpl
    def rsdrill_run_started(self, experiment: str, run_id: str, out_dir: Path) -> None:
        self._run = self._tracer.start_span(
            "rsdrill run", attributes={"rsdrill.experiment": experiment, "rsdrill.run_id": run_id}
        )

    @hookimpl
    def rsdrill_phase(self, name: str) -> None:
        if self._phase is not None:
            self._phase.end()
        self._phase = self._tracer.start_span(f"phase {name}", context=self._context())

    @hookimpl
    def rsdrill_fault_applied(self, fault: FaultRecord) -> None:
        attributes: dict[str, Any] = {"rsdrill.fault.kind": fault.kind,
                                      "rsdrill.fault.target": fault.target}  # fmt: skip
        if fault.approximation:
            attributes["rsdrill.fault.approximation"] = fault.approximation
        self._faults[fault.index] = self._tracer.start_span(
            f"fault {fault.kind}", context=self._context(), attributes=attributes,
            start_time=self._ns(fault.injected_at_s),
        )  # fmt: skip

    @hookimpl
    def rsdrill_fault_reverted(self, fault: FaultRecord) -> None:
        span = self._faults.pop(fault.index, None)
        if span is not None:
            span.end(end_time=self._ns(fault.reverted_at_s))

    @hookimpl
    def rsdrill_run_finished(self, result: Result, ops: Sequence[Op], out_dir: Path) -> None:
        from rsdrill.report.common import scalar_metrics

        for span in [*self._faults.values(), self._phase]:
            if span is not None:
                span.end()
        self._faults.clear()
        if self._run is not None:
            self._run.set_attribute("rsdrill.verdict", result.verdict)
            self._run.set_attribute("rsdrill.exit_code", result.exit_code)
            for name, value in scalar_metrics(result.metrics):
                if value is not None:
                    self._run.set_attribute(f"rsdrill.metrics.{name}", value)
            self._run.end()
        self._provider.shutdown()  # flushes: the process may end right after the run

    def _context(self) -> Any:
        from opentelemetry import trace

        return trace.set_span_in_context(self._run) if self._run is not None else None

    def _ns(self, run_t_s: float | None) -> int | None:
        clock = self._clock()
        if clock is None or run_t_s is None:
            return None
        return int((clock.wall0 + run_t_s) * 1e9)
