"""The nftables rules of a network-partition: which packets each choice drops (pure text)."""

from __future__ import annotations

import pytest

from rsdrill.platforms.machine.netcls import class_id, client_mark
from rsdrill.platforms.machine.network import Cut

ME, A, B = 27017, 27018, 27019
PEERS = f"{{ {class_id(A):#x}, {class_id(B):#x} }}"


@pytest.mark.parametrize(
    ("isolate_from", "direction", "expected"),
    [
        ("members", "inbound", [f"tcp dport {ME} ct mark {PEERS} drop",
                                f"tcp sport {{ {A}, {B} }} ct mark {class_id(ME):#x} drop"]),
        ("members", "outbound", [f"tcp sport {ME} ct mark {PEERS} drop",
                                 f"tcp dport {{ {A}, {B} }} ct mark {class_id(ME):#x} drop"]),
        ("clients", "inbound", [f"tcp dport {ME} ct mark {client_mark(ME):#x} drop"]),
        ("clients", "outbound", [f"tcp sport {ME} ct mark {client_mark(ME):#x} drop"]),
    ],
)  # fmt: skip
def test_each_direction_drops_only_its_packets(
    isolate_from: str, direction: str, expected: list[str]
) -> None:
    cut = Cut(ME, (A, B), isolate_from, direction)  # type: ignore[arg-type]
    assert cut.drop_rules() == expected


def test_both_and_all_are_the_unions() -> None:
    def rules(isolate_from: str, direction: str) -> set[str]:
        return set(Cut(ME, (A, B), isolate_from, direction).drop_rules())  # type: ignore[arg-type]

    for who in ("members", "clients"):
        assert rules(who, "both") == rules(who, "inbound") | rules(who, "outbound")
    assert rules("all", "both") == rules("members", "both") | rules("clients", "both")


def test_a_single_member_has_no_peers_to_be_cut_from() -> None:
    assert Cut(ME, (), "members", "both").drop_rules() == []
    assert len(Cut(ME, (), "all", "both").drop_rules()) == 2  # its clients still are


def test_the_table_classifies_every_member_port_and_drops_on_input_only() -> None:
    text = Cut(ME, (A, B), "members", "both").ruleset("rsdrill-test")
    assert text.startswith("table inet rsdrill-test {")
    clients = ", ".join(f"{p} : {client_mark(p):#x}" for p in (ME, A, B))
    marks = f"ct mark set tcp dport map {{ {clients} }}"
    assert f'oif "lo" tcp dport {{ {ME}, {A}, {B} }} {marks}' in text
    # Never on what a member sends: before its initiator speaks, a connection has no class.
    assert "sport" not in text.split("chain partition")[0]
    assert "meta cgroup" in text and "ct mark set meta cgroup" in text
    drops = [line for line in text.splitlines() if line.endswith(" drop")]
    assert drops and all(line.strip().startswith('iif "lo" ') for line in drops)
    assert "hook input" in text and "hook output" in text
