"""A run traced by OpenTelemetry: with OTEL_EXPORTER_OTLP_ENDPOINT set, an OTLP/HTTP collector
(in this test, on loopback) receives the run's span, its phases and the fault's span, with the
fault's fields and the measured figures as attributes."""

from __future__ import annotations

import gzip
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.harness.cli import rsdrill_run


@pytest.fixture
def collector() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    received: list[ExportTraceServiceRequest] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                received.append(ExportTraceServiceRequest.FromString(body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # Polled every 50 ms, not 500: shutdown() at teardown waits for the next poll.
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}", received
    httpd.shutdown()
    httpd.server_close()


def _attributes(span) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


def test_a_run_is_one_trace_with_its_phases_and_faults(tmp_path: Path, collector) -> None:
    url, received = collector
    experiment = {
        "name": "traced",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
        "faults": [{"at": "1s", "kind": "host-kill", "select": "secondary", "duration": "1s"}],
        "observe": {"after_revert": "1s"},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    done = rsdrill_run(
        ["run", str(path), "--out", str(tmp_path / "out"),
         "--no-live", "--no-history"],
        capture_output=True, text=True, timeout=180,
        env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_SERVICE_NAME": "drills"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    spans = [s for r in received for rs in r.resource_spans for ss in rs.scope_spans
             for s in ss.spans]  # fmt: skip
    by_name = {s.name: s for s in spans}
    run = by_name["rsdrill run"]
    assert {"phase setup", "phase faults", "phase revert", "fault host-kill"} <= set(by_name)
    assert all(s.trace_id == run.trace_id for s in spans)  # one trace
    fault = by_name["fault host-kill"]
    assert fault.parent_span_id == run.span_id
    assert _attributes(fault)["rsdrill.fault.kind"] == "host-kill"
    assert 0.5e9 <= fault.end_time_unix_nano - fault.start_time_unix_nano <= 10e9
    attributes = _attributes(run)
    assert (
        attributes["rsdrill.verdict"] == "pass"
        and "rsdrill.metrics.write_unavailable_s" in attributes
    )
    service = {kv.key: kv.value.string_value for r in received for rs in r.resource_spans
               for kv in rs.resource.attributes}  # fmt: skip
    assert service["service.name"] == "drills"
