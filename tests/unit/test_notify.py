"""Notifications and Grafana annotations against HTTP servers on loopback: request shapes,
the webhook's signature, PagerDuty's routing key from the environment, bounded timeouts, one
retry, and no secret in the logs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from report_sample import sample_result

from rsdrill.experiment.integrations import GrafanaSection, Notification
from rsdrill.history import FaultRecord, RunClock
from rsdrill.report.notify import SIGNATURE_HEADER, GrafanaAnnotations, Notifier, send


@dataclass
class Seen:
    requests: list[tuple[str, str, dict, dict]] = field(default_factory=list)
    stall_s: float = 0.0
    status: int = 200


@pytest.fixture
def server() -> Iterator[tuple[str, Seen]]:
    seen = Seen()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            time.sleep(seen.stall_s)
            seen.requests.append((self.command, self.path, dict(self.headers),
                                  {"raw": body, **json.loads(body or b"{}")}))  # fmt: skip
            self.send_response(seen.status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"id": len(seen.requests)}).encode())

        do_POST = do_PATCH = _any

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # Polled every 50 ms, not 500: shutdown() at teardown waits for the next poll.
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}", seen
    httpd.shutdown()
    httpd.server_close()


def test_webhook_slack_and_pagerduty_get_what_they_expect(server, monkeypatch) -> None:
    url, seen = server
    monkeypatch.setenv("HOOK_SECRET", "s3cret")
    monkeypatch.setenv("PD_KEY", "routing-123")
    notifier = Notifier((
        Notification(kind="webhook", url=f"{url}/hook", secret_env="HOOK_SECRET"),
        Notification(kind="slack", url=f"{url}/services/T0/B0/XYZ", on=("fail",)),
        Notification(kind="pagerduty", url=f"{url}/v2/enqueue", secret_env="PD_KEY",
                     on=("fail", "aborted", "error")),
    ))  # fmt: skip
    notifier.rsdrill_run_started(experiment="rs3-primary-kill", run_id="r1", out_dir="out")
    notifier.rsdrill_verdict(result=sample_result())  # a failed SLO
    paths = [path for _, path, _, _ in seen.requests]
    assert paths == ["/hook", "/hook", "/services/T0/B0/XYZ", "/v2/enqueue"]
    start, verdict = seen.requests[0][3], seen.requests[1][3]
    assert (start["event"], verdict["event"], verdict["verdict"]) == ("start", "fail", "fail")
    headers, body = seen.requests[1][2], seen.requests[1][3]
    expected = hmac.new(b"s3cret", body["raw"], hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER] == f"sha256={expected}"
    assert "write_unavailable_s <= 8 (observed 10.02)" in seen.requests[2][3]["text"]
    pager = seen.requests[3][3]
    assert pager["routing_key"] == "routing-123" and pager["event_action"] == "trigger"
    assert pager["payload"]["severity"] == "error" and pager["dedup_key"] == "r1"


def test_a_hanging_endpoint_costs_its_timeout_once(server, caplog) -> None:
    url, seen = server
    seen.stall_s = 3.0
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="rsdrill.notify"):
        assert send(f"{url}/services/T0/B0/SECRETPATH", {"text": "x"}, timeout_s=0.3) is None
    assert time.monotonic() - started < 2  # no retry after a timeout
    assert "no answer within 0.3 s" in caplog.text and "SECRETPATH" not in caplog.text


def test_a_refused_connection_is_tried_twice_then_logged(caplog) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens once it is closed
    with caplog.at_level(logging.WARNING, logger="rsdrill.notify"):
        assert send(f"http://user:pw@127.0.0.1:{port}/x", {}, timeout_s=1) is None
    assert "not delivered" in caplog.text and "pw" not in caplog.text


def test_a_login_in_the_url_is_sent_as_basic_auth_not_as_the_host(server, caplog) -> None:
    url, seen = server
    with caplog.at_level(logging.WARNING, logger="rsdrill.notify"):
        answer = send(url.replace("//", "//hook%40user:p%3Aw@") + "/hook", {"text": "x"},
                      timeout_s=5)  # fmt: skip
    assert answer == {"id": 1}, caplog.text
    [(_, path, headers, _)] = seen.requests
    token = base64.b64encode(b"hook@user:p:w").decode()
    assert path == "/hook" and headers["Authorization"] == f"Basic {token}"


def test_a_5xx_is_retried_once(server) -> None:
    url, seen = server
    seen.status = 503
    assert send(f"{url}/hook", {"text": "x"}, timeout_s=1) is None
    assert len(seen.requests) == 2


def test_grafana_annotates_each_faults_window_and_the_verdict(server, monkeypatch) -> None:
    url, seen = server
    monkeypatch.setenv("GRAFANA_TOKEN", "glsa_token")
    clock = RunClock(mono0=0.0, wall0=1_700_000_000.0)
    grafana = GrafanaAnnotations(GrafanaSection(url=url, dashboard_uid="db1"), lambda: clock)
    grafana.rsdrill_run_started(experiment="rs3-primary-kill", run_id="r1", out_dir="out")
    fault = FaultRecord(index=0, kind="host-kill", target="127.0.0.1:28017", injected_at_s=5.0)
    grafana.rsdrill_fault_applied(fault=fault)
    fault.reverted_at_s = 20.0
    grafana.rsdrill_fault_reverted(fault=fault)
    grafana.rsdrill_verdict(result=sample_result())
    (m1, p1, h1, b1), (m2, p2, _, b2), (m3, _, _, b3) = seen.requests
    assert (m1, p1) == ("POST", "/api/annotations") and h1["Authorization"] == "Bearer glsa_token"
    assert b1["time"] == 1_700_000_005_000 and b1["dashboardUID"] == "db1"
    assert b1["tags"] == ["rsdrill", "host-kill"]
    assert (m2, p2, b2["timeEnd"]) == ("PATCH", "/api/annotations/1", 1_700_000_020_000)
    assert m3 == "POST" and "FAIL" in b3["text"] and b3["tags"][-2:] == ["verdict", "fail"]


def test_sections_refuse_what_cannot_be_sent() -> None:
    with pytest.raises(ValueError, match="routing key"):
        Notification(kind="pagerduty")
    with pytest.raises(ValueError, match="slack needs `url`"):
        Notification(kind="slack")
