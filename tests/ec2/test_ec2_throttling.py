"""Throttled calls are retried with backoff, and a call still throttled says so in one line:
an EC2-like server on loopback answers RequestLimitExceeded as AWS does."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from harness.moto_ec2 import REGION

from rsdrill.platforms.ec2 import client
from rsdrill.platforms.ec2.injectors import Aws, AwsError, Connection

THROTTLED = (
    b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request "
    b"limit exceeded.</Message></Error></Errors><RequestID>r</RequestID></Response>"
)
EMPTY = (b'<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
         b"<requestId>r</requestId><reservationSet/></DescribeInstancesResponse>")  # fmt: skip


class Throttling(ThreadingHTTPServer):
    """Answers the first `throttle` requests with RequestLimitExceeded, then an empty reply."""

    def __init__(self, throttle: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.throttle = throttle
        self.requests = 0


class _Handler(BaseHTTPRequestHandler):
    server: Throttling

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests += 1
        throttled = self.server.requests <= self.server.throttle
        body = THROTTLED if throttled else EMPTY
        self.send_response(503 if throttled else 200)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def throttling(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], Throttling]]:
    monkeypatch.setattr(client, "MAX_ATTEMPTS", 2)  # one retry: keeps the backoff short
    servers: list[Throttling] = []

    def start(throttle: int) -> Throttling:
        server = Throttling(throttle)
        # Polled every 50 ms, not 500: shutdown() at teardown waits for the next poll.
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _aws(server: Throttling) -> Aws:
    host, port = server.server_address[:2]
    return Aws(Connection(REGION, endpoint_url=f"http://{host!s}:{port}"))


def test_throttled_calls_are_retried(throttling: Callable[[int], Throttling]) -> None:
    server = throttling(1)
    assert _aws(server).ec2("describe_instances")["Reservations"] == []
    assert server.requests == 2


def test_a_call_throttled_to_the_end_says_so(throttling: Callable[[int], Throttling]) -> None:
    server = throttling(100)
    with pytest.raises(AwsError) as refused:
        _aws(server).ec2("describe_instances")
    assert server.requests == 2
    assert str(refused.value) == (
        "RequestLimitExceeded: ec2:DescribeInstances: Request limit "
        "exceeded. (still throttled after 2 attempts with backoff)"
    )
