"""Prometheus on loopback for the `abort_on: {prometheus: ...}` tests: Debian's server binary
(.ci/install-prometheus), scraping every second a metrics page the test writes (a small HTTP
server in the test's process), so a query's answer changes when the test says."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from rsdrill.platforms.sandbox.hosts import free_port_base
from tests.harness.processes import stop

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / ".ci" / "install-prometheus"
START_TIMEOUT_S = 60.0


@dataclass
class Exposition:
    """The metrics page Prometheus scrapes: whatever `text` is when it asks."""

    text: str = ""
    scraped: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Prometheus:
    url: str
    page: Exposition
    process: subprocess.Popen[bytes]

    def set(self, text: str) -> None:
        """Serve `text` from now on, and wait until a scrape has taken it."""
        self.page.text = text
        self.page.scraped.clear()
        self.page.scraped.wait(10)


def _page_server(page: Exposition) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            page.scraped.set()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _answers(url: str, query: str) -> bool:
    """True when `query` returns a series now."""
    ask = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(ask, timeout=2) as reply:
        return bool(json.load(reply)["data"]["result"])


@contextmanager
def prometheus(directory: Path, text: str = "") -> Iterator[Prometheus]:
    done = subprocess.run([str(INSTALL), "prometheus"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    binary = done.stdout.strip().splitlines()[-1]
    page = Exposition(text)
    pages = _page_server(page)
    port = free_port_base(1)
    config = directory / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: drill\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{pages.server_port}']}}]\n"
    )
    with (directory / "prometheus.log").open("ab") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"prometheus did not start (see {directory})") from None
                time.sleep(0.1)
        # Ready is not scraped: until the first scrape is stored, every query answers empty
        # (a test asking first would read "quiet" whatever the page says).
        while not _answers(url, 'up{job="drill"} == 1'):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus scraped nothing (see {directory})")
            time.sleep(0.1)
        yield Prometheus(url, page, proc)
    finally:
        stop(proc)
        pages.shutdown()
