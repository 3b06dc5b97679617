"""A sharded sandbox placed in zones (a, b, c round-robin over each set: the config servers and
each shard keep a member in every zone) losing zone a: every set loses its zone-a member at
once (each set's first primary), each fails over by its own majority, and the writes through
the routers come back. The selection reads each set's own config."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.schema import Experiment

TARGET = {"platform": "sandbox", "topology": "sharded", "election_timeout": "1s",
          "heartbeat_interval": "200ms", "zones": ["a", "b", "c"]}  # fmt: skip


def test_a_zone_of_a_sharded_cluster_takes_a_member_of_every_set(tmp_path: Path) -> None:
    experiment = Experiment.model_validate({
        "name": "sharded-zone-kill", "target": TARGET,
        "probes": {"availability": {"interval": "20ms", "timeout": "250ms", "retries": True}},
        "faults": [{"at": "3s", "kind": "zone-outage", "way": "kill", "select": {"zone": "a"},
                    "duration": "4s"}],
        "observe": {"after_revert": "10s"},
    })  # fmt: skip
    options = RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path)
    result = run_experiment(experiment, options)
    assert result.verdict == "pass", result.error
    sets = {"config": result.target.members[0:3], "shard0": result.target.members[3:6],
            "shard1": result.target.members[6:9]}  # fmt: skip
    # Zone a holds each set's first member, which was its first primary.
    assert sorted(f.target for f in result.faults) == sorted(m[0] for m in sets.values())
    assert all(f.detail["role"] == "PRIMARY" for f in result.faults), result.faults
    for name in ("shard0", "shard1"):
        shard = result.metrics.shards[name]
        assert shard.new_primary is not None and shard.new_primary in sets[name][1:], shard
        assert shard.failover_s is not None and shard.failover_s < 10, shard
    assert result.metrics.config_servers is not None
    assert result.metrics.config_servers.failover_s is not None


@pytest.mark.parametrize(
    ("select", "where", "message"),
    [
        ("{zone: d}", "faults[0].select.zone", "no member is in zone d: target.zones has a, b, c"),
        ("{domains: minority}", "faults[0].select.domains", "each set of a sharded target has "
                                                            "its own majority"),
        ("{zone: a}, way: isolate", "faults[0].way", "cutting it off is not there yet"),
    ],
)  # fmt: skip
def test_a_sharded_domain_it_cannot_hold_is_bad_input(
    select: str, where: str, message: str
) -> None:
    text = ("name: x\ntarget: {platform: sandbox, topology: sharded, zones: [a, b, c]}\n"
            f"faults:\n  - {{at: 3s, kind: zone-outage, select: {select}, duration: 4s"
            + (", way: kill}\n" if "way" not in select else "}\n"))  # fmt: skip
    with pytest.raises(ExperimentError) as refused:
        load_experiment_text(text, "x.yaml", {})
    assert where in str(refused.value) and message in str(refused.value), str(refused.value)
