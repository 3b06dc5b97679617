"""Storage faults on sandbox/local as the experiment file states them: the faultfs rule each
becomes, when members must be on faultfs, and what the file is refused for (field named)."""

from __future__ import annotations

import pytest
import yaml

from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.plan import render_plan
from rsdrill.experiment.schema import Experiment, Fault, make_fault
from rsdrill.platforms.machine.disk import describe_rule, rule_for
from rsdrill.platforms.machine.options import needs_faultfs


def fault(text: str) -> Fault:
    return make_fault(**yaml.safe_load(text))


def test_disk_fault_becomes_an_errno_rule_on_its_operations_and_path() -> None:
    rule = rule_for(fault("{at: 1s, kind: disk-fault, duration: 5s, errno: ENOSPC,"
                          " operations: [write], probability: 0.25, path: 'journal/*',"
                          " latency: 3ms}"))  # fmt: skip
    assert (rule.errno, rule.operations, rule.probability) == ("ENOSPC", ("write",), 0.25)
    assert rule.path == "journal/*" and rule.latency_s == pytest.approx(0.003)
    assert describe_rule(rule) == "ENOSPC on 25% of write on journal/*, +3 ms per operation"
    latency_only = rule_for(fault("{at: 1s, kind: disk-fault, duration: 5s, errno: none,"
                                  " latency: 20ms}"))  # fmt: skip
    assert latency_only.errno is None and latency_only.latency_s == pytest.approx(0.02)


def test_throttle_caps_in_mib_and_detach() -> None:
    rule = rule_for(fault("{at: 1s, kind: iops-throttle, duration: 5s, write_iops: 100,"
                          " read_mb_s: 2, throughput_mb_s: 8}"))  # fmt: skip
    assert rule.write_iops == 100 and rule.read_iops is None and rule.iops is None
    assert rule.read_bytes_per_s == 2 * 1024 * 1024
    assert rule.bytes_per_s == 8 * 1024 * 1024
    assert rule.operations == ("any",)
    assert describe_rule(rule) == "100 write IOPS, 8 MiB/s, 2 read MiB/s"
    detach = rule_for(fault("{at: 1s, kind: volume-detach, duration: 5s}"))
    assert detach.detach and describe_rule(detach).startswith("every operation fails")


def test_which_experiments_put_members_on_faultfs() -> None:
    kill = fault("{at: 1s, kind: host-kill, duration: 5s}")
    power = fault("{at: 1s, kind: host-kill, duration: 5s, power_loss: true}")
    throttle = fault("{at: 1s, kind: iops-throttle, duration: 5s, iops: 10}")
    assert needs_faultfs([kill]) == (False, False)
    assert needs_faultfs([kill, throttle]) == (True, False)
    assert needs_faultfs([power]) == (True, True)


def _load(text: str) -> Experiment:
    return load_experiment_text(text, "exp.yaml", {})


def test_a_kept_sandbox_refuses_storage_faults() -> None:
    with pytest.raises(ExperimentError) as caught:
        _load("name: x\ntarget: {platform: sandbox, keep: true}\nfaults:\n"
              "  - {at: 1s, kind: volume-detach, duration: 5s}\n")  # fmt: skip
    assert "keep" in str(caught.value) and "faultfs" in str(caught.value)


def test_local_members_must_name_their_faultfs_mount() -> None:
    head = ("name: x\ntarget:\n  platform: local\n  uri: mongodb://127.0.0.1:1/\n  members:\n"
            "    - {host: '127.0.0.1:1', start: 'mongod', dbpath: /d, faultfs: /d}\n"
            "    - {host: '127.0.0.1:2', start: 'mongod', dbpath: /e}\n")  # fmt: skip
    with pytest.raises(ExperimentError) as caught:
        _load(head + "faults:\n  - {at: 1s, kind: host-kill, duration: 5s, power_loss: true}\n")
    assert "members[1].faultfs" in str(caught.value) or "members.1.faultfs" in str(caught.value)
    assert _load(head + "faults:\n  - {at: 1s, kind: host-kill, duration: 5s}\n")


def test_a_replica_fault_is_a_rule_on_that_copy_and_no_outage() -> None:
    failing = fault("{at: 1s, kind: disk-fault, duration: 5s, replica: b, operations: [any]}")
    assert rule_for(failing).replica == "b"
    assert rule_for(fault("{at: 1s, kind: disk-fault, duration: 5s}")).replica is None
    # The other copy serves: the guards do not count the member as down.
    assert not failing.takes_member_down()
    whole = fault("{at: 1s, kind: disk-fault, duration: 5s}")
    assert whole.takes_member_down()


MIRRORED = "name: x\ntarget: {platform: sandbox, sandbox: {mirror: true}}\n"


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("name: x\ntarget: {platform: sandbox}\nfaults:\n"
         "  - {at: 1s, kind: disk-fault, duration: 5s, replica: a}\n",
         "exp.yaml:4:55: faults[0].replica",
         "replica a is one copy of a sandbox member's mirrored data: add `sandbox: {mirror: "
         "true}` to the target"),
        (MIRRORED + "faults:\n  - {at: 1s, kind: host-kill, duration: 5s, power_loss: true}\n",
         "exp.yaml:4:57: faults[0].power_loss", "mirrored data (target.sandbox.mirror)"),
        ("name: x\ntarget: {platform: sandbox, keep: true, sandbox: {mirror: true}}\nfaults:\n"
         "  - {at: 1s, kind: host-kill, duration: 5s}\n",
         "exp.yaml:2:", "mirrored data put the members on faultfs"),
        (MIRRORED + "faults:\n  - {at: 1s, kind: disk-fill, duration: 5s}\n",
         "exp.yaml:4:20: faults[0].kind", "mirrored data cannot share a run"),
        ("name: x\ntarget: {platform: kubernetes, uri: 'mongodb://h:1/', kubernetes: {}}\n"
         "faults:\n  - {at: 1s, kind: disk-fault, duration: 5s, replica: a}\n",
         "exp.yaml:4:55: faults[0].replica", "not rsdrill's to fail one by one"),
        ("name: x\ntarget: {platform: local, sandbox: {mirror: true}}\nfaults: []\n",
         "exp.yaml:2:27: target.sandbox", "a `sandbox` section, but the platform is local"),
    ],
)  # fmt: skip
def test_mirrored_data_and_replica_faults_are_refused_where_they_cannot_be(
    text: str, where: str, message: str
) -> None:
    with pytest.raises(ExperimentError) as caught:
        _load(text)
    assert str(caught.value).startswith(where), str(caught.value)
    assert message in str(caught.value), str(caught.value)


def test_mirrored_sandbox_loads_and_puts_members_on_faultfs() -> None:
    exp = _load(MIRRORED + "faults:\n  - {at: 1s, kind: disk-fault, duration: 5s, replica: a}\n")
    assert exp.target.sandbox is not None and exp.target.sandbox.mirror
    assert exp.faults[0].replica == "a"
    plan = render_plan(exp)
    assert "each member's data on two copies (replicas a: data/, b: data-b/)" in plan
    assert "disk fault on replica a of its mirrored data: EIO on write/fsync for 5s" in plan
    assert "clear the disk fault, resync replica a from the other on it" in plan
