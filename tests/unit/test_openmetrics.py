"""A run's metrics as Prometheus sees them: parsed back with prometheus_client's own parsers
(names, base units, labels), pushed to a Pushgateway-shaped server on loopback, and the history's
exposition."""

from __future__ import annotations

import base64
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text
from report_sample import KILLED, sample_result
from typer.testing import CliRunner

from rsdrill import store
from rsdrill.cli.app import app
from rsdrill.report import openmetrics
from rsdrill.report.common import scalar_metrics
from rsdrill.result import Metrics, SetFigures


def _samples(text: str, parse=parse_om) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in parse(text)
        for s in family.samples
    }


def _value(samples: dict, name: str, **labels: str) -> float:
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_every_metric_of_the_result_has_a_family() -> None:
    heads = {name.partition(".")[0] for name, _ in scalar_metrics(Metrics())} | {"recovery_s"}
    heads -= set(openmetrics.SET_HEADS)
    assert heads <= set(openmetrics.FAMILIES), heads - set(openmetrics.FAMILIES)
    assert set(SetFigures.model_fields) - {"new_primary"} == set(openmetrics.SET_FAMILIES)
    families = [*openmetrics.FAMILIES.values(), *openmetrics.SET_FAMILIES.values()]
    names = [f.name for f in families]
    assert len(names) == len(set(names))
    for name in names:  # base units, Prometheus' spelling
        assert name.startswith("rsdrill_") and "_ms" not in name and not name.endswith("_s")


def test_a_result_as_openmetrics_parses_back_with_labels_and_base_units() -> None:
    result = sample_result()
    got = _samples(openmetrics.exposition(openmetrics.result_registry(result)))
    common = {"experiment": "rs3-primary-kill", "platform": "sandbox", "topology": "rs3",
              "faults": "host-kill"}  # fmt: skip
    assert _value(got, "rsdrill_write_unavailable_seconds", **common) == pytest.approx(10.02)
    assert _value(got, "rsdrill_failover_phase_seconds", phase="election") == pytest.approx(1.6)
    assert _value(got, "rsdrill_member_recovery_seconds", member=KILLED) == pytest.approx(7.0)
    # milliseconds in result.json, seconds here
    assert _value(got, "rsdrill_operation_latency_seconds", percentile="p99") == pytest.approx(
        0.048
    )
    assert _value(got, "rsdrill_operation_latency_seconds", percentile="max") == pytest.approx(2.5)
    assert _value(got, "rsdrill_run_passed") == 0  # one SLO failed
    assert _value(got, "rsdrill_run_exit_code") == 1
    assert _value(got, "rsdrill_run_info", verdict="fail", version="0.1.0") == 1
    assert _value(got, "rsdrill_slo_passed", slo="write_unavailable_s <= 8") == 0
    assert _value(got, "rsdrill_slo_passed", slo="failover_s <= 12.7") == 1
    # members without a recovery figure are left out, not written as NaN
    assert not [k for k in got if k[0] == "rsdrill_member_recovery_seconds" and
                ("member", KILLED) not in k[1]]  # fmt: skip


def test_the_textfile_is_node_exporter_text_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "textfile" / "rsdrill.prom"
    registry = openmetrics.result_registry(sample_result())
    openmetrics.write_textfile(registry, path)
    got = _samples(path.read_text(), parse_text)
    assert _value(got, "rsdrill_failover_seconds") == pytest.approx(9.87)
    assert [p.name for p in path.parent.iterdir()] == ["rsdrill.prom"]  # no temporary left


class _Gateway(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []
    authorization: list[str | None] = []
    stall_s = 0.0

    def do_PUT(self) -> None:
        time.sleep(self.stall_s)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.command, self.path, body))
        self.authorization.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[tuple[str, type[_Gateway]]]:
    handler = type("Gateway", (_Gateway,), {"received": [], "authorization": [], "stall_s": 0.0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # Polled every 50 ms, not 500: shutdown() at teardown waits for the next poll.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_push_replaces_the_experiments_group_on_a_pushgateway(gateway) -> None:
    url, handler = gateway
    with_login = url.replace("http://", "http://ops:s3cret@")
    openmetrics.push(openmetrics.result_registry(sample_result()), with_login, "rs3-primary-kill")
    [(method, path, body)] = handler.received
    assert handler.authorization == ["Basic " + base64.b64encode(b"ops:s3cret").decode()]
    assert (method, path) == ("PUT", "/metrics/job/rsdrill/experiment/rs3-primary-kill")
    got = _samples(body.decode(), parse_text)
    assert _value(got, "rsdrill_write_unavailable_seconds") == pytest.approx(10.02)


def test_a_hanging_pushgateway_costs_the_timeout_and_says_so_without_the_password(
    gateway,
) -> None:
    url, handler = gateway
    handler.stall_s = 5.0
    secret_url = url.replace("http://", "http://user:hunter2@")
    started = time.monotonic()
    with pytest.raises(openmetrics.MetricsExportError) as info:
        openmetrics.push(openmetrics.result_registry(sample_result()), secret_url, "x",
                         timeout_s=0.5)  # fmt: skip
    assert time.monotonic() - started < 4
    assert "hunter2" not in str(info.value) and "--metrics-push" in str(info.value)


def test_history_as_openmetrics_counts_runs_and_shows_the_newest(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    first = sample_result()
    newest = sample_result().model_copy(update={"verdict": "pass", "exit_code": 0,
                                                "started_at": "2025-01-03T03:04:05Z"})  # fmt: skip
    newest.metrics.write_unavailable_s = 4.5
    for result in (first, newest):
        store.record(result, tmp_path, db)
    out = CliRunner().invoke(app, ["history", "--db", str(db), "--format", "openmetrics"])
    assert out.exit_code == 0, out.output
    got = _samples(out.output)
    assert _value(got, "rsdrill_runs_total", verdict="fail") == 1
    assert _value(got, "rsdrill_runs_total", verdict="pass") == 1
    assert _value(got, "rsdrill_write_unavailable_seconds") == pytest.approx(4.5)
    assert _value(got, "rsdrill_run_passed") == 1
