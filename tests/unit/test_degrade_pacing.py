"""The network-degrade proxy's pacing (when each chunk is delivered) and the redirect rules."""

from __future__ import annotations

import random

import pytest

from rsdrill.platforms.machine import netcls
from rsdrill.platforms.machine.degrade import Degradation, listeners, ruleset
from rsdrill.platforms.machine.proxy import MARK, RTO_MIN_S, Pacer, Shape


def test_latency_delays_every_chunk_by_itself() -> None:
    pacer = Pacer(Shape(latency_s=0.05), random.Random(1))
    assert [pacer.release_at(t, 100) for t in (0.0, 0.01, 1.0)] == pytest.approx([0.05, 0.06, 1.05])


def test_jitter_stays_in_its_range_and_never_reorders() -> None:
    pacer = Pacer(Shape(latency_s=0.05, jitter_s=0.04), random.Random(2))
    # Sparse chunks (further apart than the jitter's range) each get their own delay.
    delays = [pacer.release_at(i * 0.2, 10) - i * 0.2 for i in range(500)]
    assert min(delays) >= 0.01 - 1e-9 and max(delays) <= 0.09 + 1e-9
    assert min(delays) < 0.02 and max(delays) > 0.08, "jitter spans its range"
    # Dense ones keep their order: a late chunk holds back the next, as TCP delivers them.
    times = [pacer.release_at(100 + i * 0.001, 10) for i in range(2000)]
    assert times == sorted(times)


def test_loss_stalls_a_share_by_retransmission_timeouts() -> None:
    pacer = Pacer(Shape(loss=0.2), random.Random(3))
    stalls = [pacer.stall_s() for _ in range(20000)]
    lost = [s for s in stalls if s > 0]
    assert 0.18 <= len(lost) / len(stalls) <= 0.22
    # One loss: one RTO; lost again: RTO + 2 RTO; and so on.
    assert set(lost) <= {RTO_MIN_S * k for k in (1, 3, 7, 15, 31, 63)}
    assert 0.03 <= stalls.count(3 * RTO_MIN_S) / len(stalls) <= 0.05


def test_bandwidth_spaces_chunks_by_their_size() -> None:
    pacer = Pacer(Shape(bandwidth_bytes_s=1000.0), random.Random(4))
    assert [pacer.release_at(0.0, 500) for _ in range(3)] == pytest.approx([0.5, 1.0, 1.5])
    assert pacer.release_at(5.0, 100) == pytest.approx(5.1), "an idle link starts afresh"


def test_listeners_map_directions_to_the_member_in_and_out() -> None:
    slow = Shape(latency_s=0.1)
    inbound = listeners(27001, (27002, 27003), Degradation(slow, "all", "inbound"))
    # To the member: what flows up is inbound; to a peer: what flows back is inbound.
    assert [(x.upstream_port, x.up, x.down) for x in inbound] == [
        (27001, slow, None), (27002, None, slow), (27003, None, slow)
    ]  # fmt: skip
    clients = listeners(27001, (27002,), Degradation(slow, "clients", "both"))
    assert [x.upstream_port for x in clients] == [27001]


def test_rules_route_only_the_degraded_links_and_skip_the_proxy() -> None:
    me, peer = netcls.class_id(27001), netcls.class_id(27002)
    rules = ruleset("rsdrill-27001-t", 27001, (27002,), "members", [40000, 40001])
    assert f"meta mark {MARK:#x} return" in rules
    assert f"tcp dport 27001 meta cgroup {peer:#x} redirect to :40000" in rules
    assert f"tcp dport 27002 meta cgroup {me:#x} redirect to :40001" in rules
    assert "!=" not in rules, "clients are not degraded"
    clients = ruleset("rsdrill-27001-t", 27001, (27002,), "clients", [40000])
    assert f"tcp dport 27001 meta cgroup != {{ {me:#x}, {peer:#x} }} redirect to :40000" in clients
    assert clients.count("reject with tcp reset") == 1
