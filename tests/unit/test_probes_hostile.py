"""Every probe against servers that are not MongoDB and misbehave (tests/hostile_servers.py):
it records failed attempts, never a success, and stops within a deadline."""

from __future__ import annotations

import time

import pytest
from hostile_servers import hostile_server, hostile_servers, within

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.history import History, RunClock
from rsdrill.probes.availability import ReadLoop, WriteLoop
from rsdrill.probes.base import Probe
from rsdrill.probes.durability import readback
from rsdrill.probes.failover import HelloStream
from rsdrill.probes.lag import LagPoller
from rsdrill.probes.load import build_load
from rsdrill.probes.raw_write import RawWriteLoop
from rsdrill.probes.recovery import StatusPoller

INTERVAL_S = 0.05
TIMEOUT_S = 0.25
# The hostile servers speak neither TLS nor a login.
PLAIN = ConnectOptions()
RUN_S = 1.0
# stop() + join(): at most one attempt in flight (its timeout) plus scheduling slack.
STOP_DEADLINE_S = 2.0
SERVERS = ["silent", "garbage", "reset", "drip"]


def _uri(host: str) -> str:
    return f"mongodb://{host}/?replicaSet=rs0"


def _probes(host: str, history: History, clock: RunClock) -> list[Probe]:
    """One of each probe kind, all aimed at `host`."""
    common = {"interval_s": INTERVAL_S, "timeout_s": TIMEOUT_S}
    _, load = build_load(
        history, clock, uri=_uri(host), collection="load", workload="a", rate=20, threads=1,
        records=10, record_bytes=10, distribution="uniform", timeout_s=TIMEOUT_S, w=1, seed=0,
    )  # fmt: skip
    return [
        WriteLoop(
            "write",
            history,
            clock,
            uri=_uri(host),
            collection="w",
            w="majority",
            journal=None,
            retries=False,
            **common,
        ),
        ReadLoop(
            history,
            clock,
            uri=_uri(host),
            collection="r",
            read_preference="primary",
            retries=True,
            **common,
        ),
        RawWriteLoop(
            history,
            clock,
            members=[host],
            collection="w",
            w="majority",
            journal=None,
            options=PLAIN,
            **common,
        ),
        HelloStream(history, clock, member=host, max_await_s=0.5, options=PLAIN, **common),
        StatusPoller(history, clock, member=host, options=PLAIN, **common),
        LagPoller(history, clock, members=[host], options=PLAIN, **common),
        *load,
    ]


@pytest.mark.parametrize("kind", SERVERS)
def test_every_probe_records_failures_and_stops_in_time(kind: str) -> None:
    history, clock = History(), RunClock.start()
    with hostile_server(kind) as host:
        probes = _probes(host, history, clock)
        for probe in probes:
            probe.start()
        time.sleep(RUN_S)

        def stop() -> None:
            for probe in probes:
                probe.stop()
            for probe in probes:
                probe.join(STOP_DEADLINE_S)

        within(STOP_DEADLINE_S, stop)
        for probe in probes:
            probe.close()
    names = {"write", "raw_write", "read", "failover", "recovery", "lag", "load"}
    for name in names:
        ops = history.ops(name)
        assert ops, f"{name}: no attempt recorded against the {kind} server"
        assert all(op.outcome in ("error", "timeout") for op in ops), (name, ops[:3])
        assert all(op.t_end - op.t_start <= TIMEOUT_S + 1.0 for op in ops), (name, ops[:3])


@pytest.mark.parametrize("kind", SERVERS)
def test_ledger_readback_gives_up_at_its_deadline(kind: str) -> None:
    history, clock = History(), RunClock.start()
    with hostile_server(kind) as host:
        ledger = WriteLoop("ledger", history, clock, uri=_uri(host), collection="l",
                           interval_s=INTERVAL_S, timeout_s=TIMEOUT_S, w="majority",
                           journal=None, retries=False)  # fmt: skip
        within(1.0 + 2.0, lambda: readback(ledger, timeout_s=1.0))
        ledger.close()
    (op,) = history.ops("ledger")
    assert op.op == "readback" and op.outcome == "error"


@pytest.mark.parametrize("kind", SERVERS)
def test_direct_connection_has_one_deadline_per_command(kind: str) -> None:
    with hostile_server(kind) as host:
        conn = DirectConnection(host, TIMEOUT_S, PLAIN)
        for _ in range(3):
            with pytest.raises(WireClientError):
                within(TIMEOUT_S + 0.5, lambda: conn.command("admin", {"hello": 1}))
        conn.close()


@pytest.mark.parametrize("kind", ["silent", "reset"])
def test_the_raw_writer_tries_twice_as_often_while_nothing_answers(kind: str) -> None:
    with hostile_server(kind) as host:
        raw = RawWriteLoop(History(), RunClock.start(), members=[host],
                           collection="w", interval_s=INTERVAL_S, timeout_s=TIMEOUT_S,
                           w="majority", journal=None, options=PLAIN)  # fmt: skip
        assert raw.next_wait_s() == INTERVAL_S
        raw.tick()
        raw.close()
    [op] = raw.history.ops("raw_write")
    assert op.outcome in ("error", "timeout") and op.member == host
    assert raw.next_wait_s() == INTERVAL_S / 2


def test_the_raw_writer_names_the_member_that_did_not_answer_not_a_secondary() -> None:
    # The primary timed out and the secondaries refused: the failure is the primary's (once
    # recorded as the last secondary's "not primary", a member that was never primary).
    with hostile_servers("silent", "secondary", "secondary") as members:
        raw = RawWriteLoop(History(), RunClock.start(), members=members,
                           collection="w", interval_s=INTERVAL_S, timeout_s=TIMEOUT_S,
                           w="majority", journal=None, options=PLAIN)  # fmt: skip
        raw._writable = members[0]  # it took the last write
        raw.tick()
        raw.close()
    [op] = raw.history.ops("raw_write")
    assert (op.member, op.outcome) == (members[0], "timeout"), op


def test_a_server_that_does_not_hold_awaitable_hellos_is_polled_not_hammered() -> None:
    history, clock = History(), RunClock.start()
    with hostile_server("impatient") as host:
        stream = HelloStream(history, clock, member=host, interval_s=INTERVAL_S,
                             timeout_s=TIMEOUT_S, max_await_s=0.5, options=PLAIN)  # fmt: skip
        stream.start()
        time.sleep(RUN_S)
        stream.stop()
        stream.join(STOP_DEADLINE_S)
        stream.close()
    hellos = history.ops("failover")
    # Re-asking at once would be thousands in a second; polling every interval is about 20.
    assert 5 <= len(hellos) <= RUN_S / INTERVAL_S + 3, len(hellos)
    assert all(op.ok and op.detail["writable"] for op in hellos)
