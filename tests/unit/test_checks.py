"""The user's own steady-state checks: what loading accepts, what one sample of each kind
records (a real program, a real HTTP server, a plugin found by its entry point), and the
figures judged from hand-made samples."""

from __future__ import annotations

import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from rsdrill.analysis.checks import checks
from rsdrill.analysis.slo import known_metric, observed_value
from rsdrill.experiment.checks import CheckProbe
from rsdrill.history import History, Op, RunClock
from rsdrill.probes.check import CheckLoop
from rsdrill.result import CheckFigures, Metrics


def _sample(config: dict) -> Op:
    history = History()
    loop = CheckLoop("c", history, RunClock.start(), CheckProbe.model_validate(config), "")
    loop.tick()
    loop.close()
    [op] = history.ops()
    assert op.probe == "check:c"
    return op


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({}, "exactly one of http, command, mongodb_query, plugin"),
        ({"command": ["true"], "http": {"url": "http://x/"}}, "(got http, command)"),
        ({"http": {"url": "ftp://x/"}}, "pattern"),
        ({"plugin": "nope"}, "no rsdrill.probes entry point 'nope'"),
    ],
)
def test_loading_refuses_what_cannot_be_checked(config: dict, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        CheckProbe.model_validate(config)


def test_a_command_is_healthy_by_its_exit_status() -> None:
    assert _sample({"command": ["true"]}).outcome == "ok"
    failed = _sample({"command": [sys.executable, "-c", "import sys; sys.exit('db down')"]})
    assert failed.outcome == "error"
    assert failed.detail["exit_status"] == 1 and "db down" in failed.detail["error"]
    slow = _sample({"command": ["sleep", "5"], "timeout": "200ms"})
    assert slow.outcome == "timeout" and slow.t_end - slow.t_start < 2
    missing = _sample({"command": ["/nonexistent/check"]})
    assert missing.outcome == "error" and "cannot run" in missing.detail["error"]


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/ok" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    # Polled every 50 ms, not 500: shutdown() at teardown waits for the next poll.
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_an_http_check_is_healthy_by_status_and_latency(health: str) -> None:
    assert _sample({"http": {"url": f"{health}/ok"}}).outcome == "ok"
    down = _sample({"http": {"url": f"{health}/down"}})
    assert down.outcome == "error" and down.detail["status"] == 503
    assert _sample({"http": {"url": f"{health}/down", "status": [503]}}).outcome == "ok"
    too_slow = _sample({"http": {"url": f"{health}/ok", "latency_max": 0}})
    assert too_slow.outcome == "error" and "slower than" in too_slow.detail["error"]


def test_a_plugin_is_found_by_its_entry_point(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "toycheck.py").write_text(
        "STATE = {'up': True}\ndef check():\n    return STATE['up']\n"
    )
    info = site / "toycheck-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toycheck\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rsdrill.probes]\ntoy = toycheck:check\n")
    monkeypatch.syspath_prepend(str(site))
    assert _sample({"plugin": "toy"}).outcome == "ok"
    import toycheck

    toycheck.STATE["up"] = False
    assert _sample({"plugin": "toy"}).outcome == "error"
    monkeypatch.delitem(sys.modules, "toycheck")


def test_figures_from_samples() -> None:
    def op(t: float, ok: bool, probe: str = "check:web") -> Op:
        return Op(probe, "check", None, t, t + 0.01, "ok" if ok else "error", {})

    samples = [op(t / 10, not 1.0 <= t / 10 < 2.5) for t in range(40)]
    figures = checks([*samples, op(0.5, False, probe="write")])
    assert set(figures) == {"web"}
    web = figures["web"]
    assert web.samples == 40 and web.failed_samples == 15
    assert web.unavailable_s == pytest.approx(1.6)  # last healthy end 0.91 → next 2.51
    metrics = Metrics(probe={"web": web})
    assert known_metric("probe.web.unavailable_s") and not known_metric("probe.web.nope")
    assert observed_value(metrics, "probe.web.failed_samples") == 15
    assert observed_value(Metrics(probe={"web": CheckFigures()}), "probe.web.unavailable_s") is None
    assert observed_value(metrics, "probe.other.samples") is None
