"""network-degrade on real member processes: the member's links redirected (nftables) through
the pacing proxy. A client's round trip grows by the shaped latency of both directions; links
to the other members only slow what needs them (w:majority, not w:1); revert removes the table
and the proxy, and round trips are back to what they were."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, WriteConcern

from rsdrill.platforms.machine import netcls
from rsdrill.platforms.machine.degrade import (
    PROXY_MODULE,
    Degradation,
    NetworkDegrade,
    proxy_pids,
    undegrade,
)
from rsdrill.platforms.machine.network import rsdrill_tables
from rsdrill.platforms.machine.proxy import Listener, Shape, config_json
from rsdrill.platforms.sandbox.hosts import SandboxHosts
from rsdrill.sandbox.cluster import Sandbox
from tests.harness.members import wait_until, writable_primary

INSTALL = Path(__file__).resolve().parents[2] / ".ci" / "install-netfilter"
LATENCY_S = 0.05


@pytest.fixture(scope="module", autouse=True)
def nft() -> None:
    if shutil.which("nft") is None:
        subprocess.run([str(INSTALL)], check=True, timeout=300)
    assert shutil.which("nft"), f"{INSTALL} did not install nft"


@pytest.fixture
def degrades() -> Iterator[list[NetworkDegrade]]:
    """Degradations made by a test; reverted after it whatever happened."""
    made: list[NetworkDegrade] = []
    yield made
    for degrade in made:
        degrade.revert()


def _degrade(
    sandbox: Sandbox, host: str, made: list[NetworkDegrade], shape: Shape, **how: Any
) -> NetworkDegrade:
    members = [m.host for m in sandbox.spec.members]
    degrade = NetworkDegrade(SandboxHosts(sandbox), host, members,
                             Degradation(shape, **how), seed=7)  # fmt: skip
    made.append(degrade)
    return degrade


def _median_ms(action: Callable[[], object], count: int = 15) -> float:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _direct(host: str) -> MongoClient[Any]:
    return MongoClient(host, directConnection=True, serverSelectionTimeoutMS=5000,
                       socketTimeoutMS=5000, retryWrites=True)  # fmt: skip


def test_client_round_trip_grows_by_both_directions_latency_then_returns(
    replset: Callable[..., Sandbox], degrades: list[NetworkDegrade]
) -> None:
    sandbox = replset()
    primary = wait_until(lambda: writable_primary(sandbox), 10, "a primary").host
    with _direct(primary) as client:
        ping = lambda: client.admin.command("ping")  # noqa: E731
        before = _median_ms(ping)
        degrade = _degrade(sandbox, primary, degrades, Shape(latency_s=LATENCY_S),
                           between="clients", direction="both")  # fmt: skip
        degrade.inject()
        assert degrade.table in rsdrill_tables()
        assert len(proxy_pids(degrade.token)) == 1
        # The pooled connection predates the fault: reset on its next use, then redirected.
        wait_until(lambda: _succeeds(ping), 5, "the client to reconnect")
        assert degrade.verify(5)
        during = _median_ms(ping)
        added = during - before
        assert 0.75 * 2 * LATENCY_S * 1000 <= added <= 1.25 * 2 * LATENCY_S * 1000, (before, during)

        degrade.revert()
        assert degrade.table not in rsdrill_tables()
        assert not proxy_pids(degrade.token)
        assert not {m.port for m in sandbox.spec.members} & set(netcls.tagged_ports())
        wait_until(lambda: _succeeds(ping), 5, "the client to reconnect directly")
        after = _median_ms(ping)
        assert after < before + 0.25 * LATENCY_S * 1000, (before, after)
        again = undegrade(degrade.revert_action() or {})
        assert "nothing left to remove" in again


def test_member_links_slow_majority_writes_not_w1_writes(
    replset: Callable[..., Sandbox], degrades: list[NetworkDegrade]
) -> None:
    sandbox = replset()
    primary = wait_until(lambda: writable_primary(sandbox), 10, "a primary").host
    with _direct(primary) as client:
        coll = client.rsdrill_test.get_collection("degrade")
        w1 = coll.with_options(write_concern=WriteConcern(w=1))
        majority = coll.with_options(write_concern=WriteConcern(w="majority"))
        degrade = _degrade(sandbox, primary, degrades, Shape(latency_s=LATENCY_S),
                           between="members", direction="both")  # fmt: skip
        degrade.inject()
        assert degrade.verify(10)
        w1_ms = _median_ms(lambda: w1.insert_one({}))
        majority_ms = _median_ms(lambda: majority.insert_one({}))
        # Clients are not degraded: a w:1 write stays fast; a majority write waits for a
        # secondary's fetch and its report, both crossing the slowed member links.
        assert w1_ms < LATENCY_S * 1000 / 2, w1_ms
        assert majority_ms >= 2 * LATENCY_S * 1000 * 0.75, majority_ms


def test_loss_stalls_a_share_of_exchanges(
    replset: Callable[..., Sandbox], degrades: list[NetworkDegrade]
) -> None:
    sandbox = replset()
    primary = wait_until(lambda: writable_primary(sandbox), 10, "a primary").host
    with _direct(primary) as client:
        degrade = _degrade(sandbox, primary, degrades, Shape(loss=0.3),
                           between="clients", direction="both")  # fmt: skip
        degrade.inject()
        wait_until(lambda: _succeeds(lambda: client.admin.command("ping")), 5, "a reconnect")
        times = []
        for _ in range(40):
            start = time.perf_counter()
            client.admin.command("ping")
            times.append(time.perf_counter() - start)
        stalled = sum(t >= 0.2 for t in times)
        # Two directions at 30 %: about half the exchanges wait out at least one resend.
        assert 8 <= stalled <= 32, sorted(times)


def _succeeds(action: Callable[[], object]) -> bool:
    try:
        action()
    except Exception:  # any failure means "not yet"
        return False
    return True


def test_the_proxy_stopped_during_a_handshake_delay_prints_no_traceback() -> None:
    """A connection still in its shaped handshake delay when the proxy stops is closed quietly
    (asyncio printed the handler's cancellation as 'Exception in callback ... CancelledError'
    on rsdrill's terminal)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    config = config_json("test", [Listener(listener.getsockname()[1], Shape(latency_s=5.0), None)],
                         seed=1)  # fmt: skip
    proxy = subprocess.Popen([sys.executable, "-m", PROXY_MODULE, config], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert proxy.stdout is not None
        [port] = json.loads(proxy.stdout.readline())["ports"]
        client = socket.create_connection(("127.0.0.1", port))
        time.sleep(0.3)  # the time under test: the handler is inside its 5 s delay
        proxy.send_signal(signal.SIGTERM)
        _, stderr = proxy.communicate(timeout=10)
        client.close()
    finally:
        proxy.kill()
        listener.close()
    assert proxy.returncode == 0, stderr
    assert "Traceback" not in stderr and "Exception" not in stderr, stderr
