"""A real run tells a webhook and Grafana (both loopback servers the test runs): the start,
the fault's window as an annotation closed at its revert, and the verdict, in that order."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.harness.cli import rsdrill_run


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, str, dict]]]]:
    seen: list[tuple[str, str, dict]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append((self.command, self.path, json.loads(body or b"{}")))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps({"id": 7}).encode())

        do_POST = do_PATCH = _any

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # Polled every 50 ms, not 500: shutdown() at teardown waits for the next poll.
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}", seen
    httpd.shutdown()
    httpd.server_close()


def test_a_run_notifies_and_annotates_in_order(tmp_path: Path, receiver) -> None:
    url, seen = receiver
    experiment = {
        "name": "told",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
        "faults": [{"at": "1s", "kind": "host-kill", "select": "secondary", "duration": "1s"}],
        "observe": {"after_revert": "1s"},
        "notify": [{"kind": "webhook", "url": f"{url}/hook"}],
        "grafana": {"url": url, "tags": ["drill"]},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    done = rsdrill_run(
        ["run", str(path), "--out", str(tmp_path / "out"),
         "--no-live", "--no-history"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    order = [(method, path, body.get("event") or body.get("tags", [""])[-1])
             for method, path, body in seen]  # fmt: skip
    assert order == [
        ("POST", "/hook", "start"),
        ("POST", "/api/annotations", "host-kill"),
        ("PATCH", "/api/annotations/7", ""),
        ("POST", "/api/annotations", "pass"),
        ("POST", "/hook", "pass"),
    ], order
    opened, closed = seen[1][2]["time"], seen[2][2]["timeEnd"]
    assert 500 <= closed - opened <= 10_000  # the fault's window, in ms


@pytest.fixture
def hanging() -> Iterator[str]:
    """A server that takes every request and never answers (until the test ends)."""
    released = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _hang(self) -> None:
            released.wait(60)

        do_POST = do_PATCH = _hang

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    # Polled every 50 ms, not 500: shutdown() at teardown waits for the next poll.
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    released.set()
    httpd.shutdown()
    httpd.server_close()


def _timed_run(tmp_path: Path, experiment: dict, *args: str, env: dict[str, str] | None = None
               ) -> tuple[float, subprocess.CompletedProcess[str]]:  # fmt: skip
    tmp_path.mkdir()
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    started = time.monotonic()
    done = rsdrill_run(
        ["run", str(path), "--out", str(tmp_path / "out"),
         "--no-live", "--no-history", *args],
        capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})},
    )  # fmt: skip
    return time.monotonic() - started, done


def test_a_hanging_endpoint_costs_a_run_its_timeouts_only_and_no_secret_leaks(
    tmp_path: Path, receiver, hanging: str
) -> None:
    """The same run with every place it tells hanging (1 s timeouts, no retry after a timeout):
    at most the four requests' timeouts longer than with a quick receiver told through
    `--notify`; the Grafana token appears in no output."""
    url, seen = receiver
    experiment = {
        "name": "told",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
        "faults": [{"at": "1s", "kind": "stepdown", "select": "primary"}],
        "observe": {"after_revert": "1s"},
    }
    quick_s, quick = _timed_run(tmp_path / "quick", experiment, "--notify", f"webhook={url}/cli")
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert [(p, b["event"]) for _, p, b in seen] == [("/cli", "start"), ("/cli", "pass")]
    token = "glsa_rsdrill-test-token-do-not-print"
    experiment |= {
        "notify": [{"kind": "webhook", "url": f"{hanging}/hook", "timeout": "1s"}],
        "grafana": {"url": hanging, "timeout": "1s", "token_env": "RSDRILL_TEST_GRAFANA"},
    }
    slow_s, slow = _timed_run(tmp_path / "slow", experiment,
                              env={"RSDRILL_TEST_GRAFANA": token})  # fmt: skip
    assert slow.returncode == 0, slow.stdout + slow.stderr
    # Webhook start and verdict, Grafana's fault window and verdict: 1 s each at most.
    assert slow_s - quick_s <= 4 + 4, (quick_s, slow_s)
    outputs = [slow.stdout, slow.stderr] + [
        p.read_text(errors="replace") for p in (tmp_path / "slow").rglob("*") if p.is_file()
    ]
    assert not [text for text in outputs if token in text]
