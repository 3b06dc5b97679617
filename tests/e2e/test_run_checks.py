"""Steady-state checks of the user's own in a run: an application's health endpoint that needs
the replica set's primary fails while the primary is killed, and the result, the SLO and the
report say for how long."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from tests.harness.cli import rsdrill_run


class _App(http.server.BaseHTTPRequestHandler):
    """An application whose health needs a writable primary (pings it, 300 ms at most)."""

    client: MongoClient | None = None

    def do_GET(self) -> None:
        try:
            assert self.client is not None
            self.client.admin.command("ping")
            status = 200
        except PyMongoError:
            status = 503
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def app_on(free_port_base: Callable[[int], int]) -> Iterator[tuple[int, str]]:
    """(sandbox port base, the app's health URL): the app talks to the sandbox the run builds."""
    base = free_port_base(3)
    uri = f"mongodb://127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}/?replicaSet=rs0"
    client: MongoClient = MongoClient(uri, serverSelectionTimeoutMS=300, socketTimeoutMS=300,
                                      connectTimeoutMS=300, heartbeatFrequencyMS=500)  # fmt: skip
    handler = type("App", (_App,), {"client": client})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # Polled every 50 ms, not 500: shutdown() at teardown waits for the next poll.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield base, f"http://127.0.0.1:{server.server_port}/health"
    finally:
        server.shutdown()
        server.server_close()
        client.close()


def test_an_http_check_measures_the_applications_outage(
    tmp_path: Path, app_on: tuple[int, str]
) -> None:
    base, url = app_on
    experiment = {
        "name": "app-health",
        "target": {"platform": "sandbox", "topology": "rs3", "port_base": base,
                   "election_timeout": "1s"},
        "probes": {"checks": {"app": {"http": {"url": url}, "interval": "50ms",
                                      "timeout": "1s"}}},
        "faults": [{"at": "2s", "kind": "host-kill", "duration": "4s"}],
        "observe": {"after_revert": "3s"},
        "slo": {"probe.app.unavailable_s": "<= 0.01"},  # fails on purpose: the app was down
    }  # fmt: skip
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    done = rsdrill_run(
        ["run", str(path), "--out", str(tmp_path / "out"),
         "--no-live", "--no-history"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["verdict"] == "fail", done.stdout + done.stderr
    app = result["metrics"]["probe"]["app"]
    write_gap = result["metrics"]["write_unavailable_s"]
    # down while there was no primary: about the write gap, far more than one sample interval
    assert 0.5 < app["unavailable_s"] < write_gap + 3, (app, write_gap)
    assert app["failed_samples"] > 0 and app["samples"] > app["failed_samples"]
    [slo] = result["slo"]
    assert slo["metric"] == "probe.app.unavailable_s" and slo["observed"] == app["unavailable_s"]
    assert "probe.app.unavailable_s" in (tmp_path / "out" / "report.html").read_text()
    # the app's own samples are not the probes' load on the cluster
    assert "check:app" not in result["metrics"]["probe_ops_per_s_by_probe"]


def test_an_slo_on_a_check_that_is_not_configured_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: x\ntarget: {platform: sandbox, topology: rs3}\n"
        "faults: [{at: 1s, kind: stepdown}]\nslo: {probe.web.unavailable_s: '<= 1'}\n"
    )
    done = rsdrill_run(["validate", str(path)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "probes.checks.web" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
