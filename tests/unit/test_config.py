"""Replica-set arithmetic that write concern and elections rely on."""

from __future__ import annotations

import pytest

from rsdrill.sandbox.config import ReplSetSpec, Settings, build_topology


@pytest.mark.parametrize(
    ("topology", "members", "majority", "write_majority", "default_w"),
    [("rs1", 1, 1, 1, "majority"), ("rs3", 3, 2, 2, "majority"), ("psa", 3, 2, 2, 1)],
)
def test_topologies(topology, members, majority, write_majority, default_w) -> None:
    spec = build_topology(topology, port_base=28000)
    assert len(spec.members) == members
    assert spec.majority == majority
    assert spec.write_majority == write_majority
    assert spec.implicit_default_w == default_w
    assert [m.port for m in spec.members] == list(range(28000, 28000 + members))


def test_psa_has_one_arbiter_without_priority() -> None:
    spec = build_topology("psa", port_base=28000)
    arbiters = [m for m in spec.members if m.arbiter_only]
    assert len(arbiters) == 1 and arbiters[0].priority == 0
    assert len(spec.data_bearing) == 2


def test_json_round_trip(tmp_path) -> None:
    spec = build_topology(
        "rs3", port_base=28000, settings=Settings(election_timeout_ms=1234), oplog_size_bytes=4096
    )
    spec.write(tmp_path)
    assert ReplSetSpec.read(tmp_path) == spec


def test_unknown_topology_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown topology 'rs7'"):
        build_topology("rs7", port_base=28000)


def test_an_experiments_timeouts_reach_the_sandboxs_config(tmp_path) -> None:
    """`target.election_timeout` and `heartbeat_timeout` become the set's electionTimeoutMillis
    and heartbeatTimeoutSecs (the PSA seeds lower both)."""
    from rsdrill.experiment.loader import load_experiment_text
    from rsdrill.platforms.sandbox.target import SandboxTarget

    exp = load_experiment_text(
        "name: x\ntarget: {platform: sandbox, topology: psa, election_timeout: 5s, "
        "heartbeat_timeout: 5}\nfaults: [{at: 1s, kind: stepdown}]\n",
        "x.yaml",
        {},
    )
    target = SandboxTarget(exp.target, tmp_path)
    assert target.spec.settings == Settings(election_timeout_ms=5000, heartbeat_timeout_s=5)
