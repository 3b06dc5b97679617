"""A sharded cluster rsdrill did not build (`platform: local`, `topology: sharded`): found from
the routers in `target.uri` (listShards, the config servers from the router's serverStatus,
each set's members from their hello), checked, and run against as the sandbox's own is; and a
URI naming a member where a router was meant, refused with the routers' address."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from rsdrill.engine.check import check_experiment
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from tests.harness import sharded_cluster as cluster
from tests.harness.cli import rsdrill_run

PROBES = {"availability": {"interval": "20ms", "timeout": "250ms", "retries": True}}
KILL = {"at": "2s", "kind": "host-kill", "select": {"shard": "shard1", "role": "primary"},
        "duration": "3s"}  # fmt: skip


def _spec(directory: Path, **changes: Any) -> dict[str, Any]:
    target = {"platform": "local", "topology": "sharded", "uri": cluster.uri(directory),
              "members": cluster.local_members(directory)}  # fmt: skip
    spec = {"name": "found-cluster", "target": target, "probes": PROBES, "faults": [KILL],
            "observe": {"after_revert": "5s"}}  # fmt: skip
    for key, value in changes.items():
        if key == "uri":
            target["uri"] = value
        else:
            spec[key] = value
    return spec


def _cli(tmp_path: Path, spec: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return rsdrill_run([*args, str(path)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_shard_primary_killed_in_a_cluster_found_from_its_routers(
    tmp_path: Path, existing_cluster: Path
) -> None:
    sets = cluster.sets(existing_cluster)
    experiment = Experiment.model_validate(_spec(existing_cluster))
    result = run_experiment(
        experiment,
        RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path, assume_yes=True),
    )
    assert result.verdict == "pass", result.error
    # Every member of every set was found from the routers (none is in the URI).
    assert sorted(result.target.members) == sorted(h for hosts in sets.values() for h in hosts)
    killed = result.faults[0].target
    assert killed in sets["shard1"] and result.faults[0].detail["role"] == "PRIMARY"
    cluster.assert_only_struck_shard_interrupted(result, sets, "shard1", killed)
    # The killed member came back by its own start command (the run's revert).
    cluster.wait_back_as_secondary(killed)


def test_check_shows_the_cluster_as_the_run_will_see_it(existing_cluster: Path) -> None:
    checks = check_experiment(Experiment.model_validate(_spec(existing_cluster)))
    by_name = {c.name: c for c in checks}
    assert [c for c in checks if c.ok is False] == []
    sets = cluster.sets(existing_cluster)
    for router in cluster.routers(existing_cluster):
        assert by_name[f"reach {router}"].ok
    assert "sharded cluster" in by_name["topology"].detail
    assert by_name["shard shard0"].detail.count("PRIMARY") == 1
    assert all(h in by_name["shard shard1"].detail for h in sets["shard1"])
    assert all(h in by_name["config servers"].detail for h in sets["configRS"])
    assert by_name["balancer"].detail.startswith("off")


def test_check_names_balancer_control_when_the_run_is_to_stop_it(existing_cluster: Path) -> None:
    spec = _spec(existing_cluster, guards={"stop_balancer": True})
    by_name = {c.name: c for c in check_experiment(Experiment.model_validate(spec))}
    assert by_name["privileges"].detail.endswith(
        "; balancer control (balancerStatus, balancerStop, balancerStart: "
        "guards.stop_balancer): open to any client"
    )
    # This cluster's balancer is off: the run will leave it so.
    assert by_name["balancer"].detail == (
        "off (moves no chunk: guards.stop_balancer leaves it as it is)"
    )


def test_a_shard_member_where_a_router_was_meant_is_refused_with_the_routers(
    tmp_path: Path, existing_cluster: Path
) -> None:
    member = cluster.sets(existing_cluster)["shard0"][1]
    done = _cli(tmp_path, _spec(existing_cluster, uri=f"mongodb://{member}/"), "run", "--yes")
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "Traceback" not in said
    assert f"{member}, a member of replica set shard0 (shard shard0" in said
    routers = ",".join(cluster.routers(existing_cluster))
    assert f"mongodb://{routers}/" in said
    assert "check failed, nothing was injected" in said


def _failed_checks(spec: dict[str, Any]) -> str:
    """What `rsdrill check` (and `rsdrill run` before anything) refuses, one line a check."""
    checks = check_experiment(Experiment.model_validate(spec))
    return "\n".join(f"{c.name}: {c.detail}" for c in checks if c.ok is False)


def test_names_the_cluster_does_not_have_are_refused_before_anything_is_injected(
    tmp_path: Path, existing_cluster: Path
) -> None:
    faults = [{**KILL, "select": {"shard": "shard7", "role": "primary"}}]
    done = _cli(tmp_path, _spec(existing_cluster, faults=faults), "run", "--yes")
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "faults[0].select.shard: no shard 'shard7': the cluster has shard0, shard1" in said
    slo = {"shards.shard9.write_unavailable_s": "<= 1"}
    assert "no shard 'shard9'" in _failed_checks(_spec(existing_cluster, slo=slo))
    # A router's URI for a replica-set experiment says what it is.
    spec = _spec(existing_cluster, faults=[{**KILL, "select": "primary"}])
    spec["target"]["topology"] = "rs3"
    assert "sharded cluster): say `topology: sharded`" in _failed_checks(spec)


def test_a_member_not_listed_on_a_local_target_is_refused(existing_cluster: Path) -> None:
    spec = _spec(existing_cluster)
    left_out = cluster.sets(existing_cluster)["shard1"][2]
    spec["target"]["members"] = [m for m in spec["target"]["members"] if m["host"] != left_out]
    assert f"the cluster's {left_out}: not in target.members" in _failed_checks(spec)
