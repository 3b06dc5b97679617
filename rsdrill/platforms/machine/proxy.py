"""The userspace link of `network-degrade` on this machine: a TCP proxy that holds each chunk of
a member's traffic back as a slow, lossy or narrow link would deliver it.

This kernel has no netem qdisc, so the degraded connections are redirected (nftables, see
`degrade.py`) to listeners of this process, which connects on to the real member and paces both
directions. What each direction's `Shape` does to the byte stream:

- latency (+ uniform jitter of ± `jitter_s`): every chunk arrives that much later; chunks keep
  their order, as TCP delivers them (a late chunk holds back the ones behind it);
- loss: TCP hides a lost segment behind its retransmission, so the application sees a stall,
  not a gap: a lost chunk is held for the retransmission timeout (200 ms, Linux's minimum, as
  on loopback), doubled for each further loss of the same chunk;
- bandwidth: chunks leave at most at `bandwidth_bytes_s` (their serialisation delay adds up).

The upstream connection is made after one round trip of the shaped latency (the handshake a
slow link would cost). Upstream sockets carry `MARK` so the redirect rules let them pass.

Run as `python -m rsdrill.platforms.machine.proxy CONFIG_JSON`: it prints one JSON line with its
listening ports, then serves until SIGTERM. The config's `token` names the process in its
command line, so `rsdrill recover` can find it from the journal alone.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import socket
import sys
from dataclasses import asdict, dataclass
from typing import Any

MARK = 0x52440001
"""SO_MARK of the proxy's own upstream connections (the redirect rules skip it)."""
RTO_MIN_S = 0.2
CHUNK = 65536
QUEUE_CHUNKS = 64
"""Chunks in flight per direction before the proxy stops reading (TCP's window, roughly)."""


@dataclass(frozen=True)
class Shape:
    """What one direction of a link does to what crosses it."""

    latency_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0
    bandwidth_bytes_s: float | None = None


class Pacer:
    """When each chunk of one direction is delivered (times on the caller's clock)."""

    def __init__(self, shape: Shape, rng: random.Random) -> None:
        self.shape = shape
        self.rng = rng
        self._wire_free = 0.0
        self._last = 0.0

    def stall_s(self) -> float:
        """The retransmission wait of a chunk: 0, or RTO, RTO + 2 RTO, ... while it is lost."""
        stall, rto = 0.0, RTO_MIN_S
        while self.shape.loss and self.rng.random() < self.shape.loss:
            stall += rto
            rto *= 2
        return stall

    def release_at(self, now: float, size: int) -> float:
        shape = self.shape
        sent = now
        if shape.bandwidth_bytes_s:
            sent = max(now, self._wire_free) + size / shape.bandwidth_bytes_s
            self._wire_free = sent
        delay = shape.latency_s + self.rng.uniform(-shape.jitter_s, shape.jitter_s)
        at = sent + max(0.0, delay) + self.stall_s()
        self._last = max(self._last, at)  # in order, as TCP delivers
        return self._last


@dataclass(frozen=True)
class Listener:
    """One redirected destination: the member port it forwards to, and the shapes of what
    flows towards it (`up`) and back (`down`); None leaves a direction as it is."""

    upstream_port: int
    up: Shape | None
    down: Shape | None


def config_json(token: str, listeners: list[Listener], seed: int) -> str:
    """The proxy's command-line config."""
    return json.dumps({"token": token, "seed": seed, "listeners": [asdict(x) for x in listeners]})


def _listeners(config: dict[str, Any]) -> list[Listener]:
    def shape(raw: dict[str, Any] | None) -> Shape | None:
        return None if raw is None else Shape(**raw)

    return [
        Listener(x["upstream_port"], shape(x["up"]), shape(x["down"])) for x in config["listeners"]
    ]


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pacer: Pacer | None
) -> None:
    loop = asyncio.get_running_loop()
    if pacer is None:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        return
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)

    async def deliver() -> None:
        while True:
            at, data = await queue.get()
            if not data:
                return
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    delivering = asyncio.create_task(deliver())
    try:
        while data := await reader.read(CHUNK):
            await queue.put((pacer.release_at(loop.time(), len(data)), data))
        await queue.put((0.0, b""))
        await delivering
    finally:
        delivering.cancel()


async def _connect_upstream(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


def _handler(listener: Listener, rng: random.Random) -> Any:
    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        up = Pacer(listener.up, rng) if listener.up else None
        down = Pacer(listener.down, rng) if listener.down else None
        handshake = sum(s.latency_s for s in (listener.up, listener.down) if s)
        try:
            if handshake:
                await asyncio.sleep(handshake)
            u_reader, u_writer = await _connect_upstream(listener.upstream_port)
        except (OSError, asyncio.CancelledError):
            # Cancelled: the proxy stopped during the handshake delay; a handler that raised it
            # would make asyncio print a traceback (its connection callback reads the result).
            c_writer.close()
            return
        sock = c_writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pumps = [
            asyncio.create_task(_pump(c_reader, u_writer, up)),
            asyncio.create_task(_pump(u_reader, c_writer, down)),
        ]
        try:
            # Either side closing or failing ends the connection on both.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # the proxy is stopping: close both sides quietly
        finally:
            for task in pumps:
                task.cancel()
            for writer in (c_writer, u_writer):
                writer.close()

    return handle


async def serve(config: dict[str, Any]) -> None:
    """Listen for every listener of `config`, print the ports, serve until SIGTERM."""
    rng = random.Random(config["seed"])
    servers = [
        await asyncio.start_server(_handler(x, rng), "127.0.0.1", 0, reuse_address=True)
        for x in _listeners(config)
    ]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    print(json.dumps({"ports": ports}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str]) -> int:
    asyncio.run(serve(json.loads(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
