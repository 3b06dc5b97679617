"""`platform: vsphere` in experiment files: what it accepts, and what it refuses with the field
named and nothing injected (disk-fault, per-direction limits, partial partitions...)."""

from __future__ import annotations

import pytest

from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.plan import render_plan
from rsdrill.experiment.schema import Experiment

HEAD = """name: x
target:
  platform: vsphere
  topology: rs3
  uri: mongodb://db1:27017/?replicaSet=rs0
  vsphere:
    host: vc.example.com
    user: rsdrill@vsphere.local
{vsphere}faults:
"""


def load(faults: str, vsphere: str = "") -> Experiment:
    return load_experiment_text(HEAD.format(vsphere=vsphere) + faults, "exp.yaml", {})


def error_of(faults: str, vsphere: str = "") -> str:
    with pytest.raises(ExperimentError) as caught:
        load(faults, vsphere)
    return str(caught.value)


def test_every_vsphere_fault_loads_with_its_options() -> None:
    exp = load(
        "  - {at: 1s, kind: host-kill, scope: host, restart: {after: 20s},"
        " vsphere: {restart_on: other}}\n"
        "  - {at: 1s, kind: host-freeze, duration: 5s}\n"
        "  - {at: 1s, kind: volume-detach, duration: 5s, vsphere: {disk: Hard disk 2}}\n"
        "  - {at: 1s, kind: iops-throttle, duration: 5s, iops: 100, vsphere: {disk: 1}}\n"
        "  - {at: 1s, kind: network-partition, duration: 5s, isolate_from: all,"
        " vsphere: {nic: Network adapter 1}}\n"
        "  - {at: 1s, kind: stepdown}\n"
        "  - {at: 1s, kind: zone-outage, way: kill, select: {zone: C1}, duration: 5s}\n",
        vsphere="    port: 8443\n    password_env: VC_PASS\n    vms: {by: name, name: "
        "'mongo-{short}-{port}'}\n",
    )
    assert exp.target.vsphere is not None and exp.target.vsphere.port == 8443
    assert [f.vsphere.disk for f in exp.faults[2:4] if f.vsphere] == ["Hard disk 2", 1]
    assert exp.target.vsphere.insecure is False  # TLS is verified unless told otherwise


@pytest.mark.parametrize(
    ("fault", "where", "says"),
    [
        ("{at: 1s, kind: disk-fault, duration: 5s}", "faults[0].kind",
         "disk-fault is not available on vSphere"),
        ("{at: 1s, kind: iops-throttle, duration: 5s, write_iops: 10}", "faults[0].write_iops",
         "reads and writes together"),
        ("{at: 1s, kind: iops-throttle, duration: 5s, iops: 10, latency: 5ms}",
         "faults[0].latency", "use `iops`"),
        ("{at: 1s, kind: network-partition, duration: 5s, isolate_from: clients}",
         "faults[0].isolate_from", "write isolate_from: all"),
        ("{at: 1s, kind: network-partition, duration: 5s, direction: inbound}",
         "faults[0].direction", "cuts both directions"),
        ("{at: 1s, kind: host-freeze, duration: 5s, scope: host}", "faults[0].scope",
         "applies to host-kill, not host-freeze"),
        ("{at: 1s, kind: host-kill, duration: 5s, scope: node}", "faults[0].scope",
         "scope node is for kubernetes"),
        ("{at: 1s, kind: host-kill, duration: 5s, engine: fis}", "faults[0].engine",
         "drop `engine`"),
        ("{at: 1s, kind: host-kill, duration: 5s, restart: {volume: wipe}}",
         "faults[0].restart.volume", "volume wipe is not available"),
        ("{at: 1s, kind: host-kill, duration: 5s, vsphere: {disk: 1}}", "faults[0].vsphere.disk",
         "applies to volume-detach and iops-throttle, not host-kill"),
        ("{at: 1s, kind: volume-detach, duration: 5s, vsphere: {nic: eth0}}",
         "faults[0].vsphere.nic", "applies to network-partition"),
        ("{at: 1s, kind: host-kill, restart: false, vsphere: {restart_on: other}}",
         "faults[0].vsphere.restart_on", "never powers the VMs on again"),
        ("{at: 1s, kind: host-kill, duration: 5s, ec2: {action: stop}}", "faults[0].ec2",
         "ec2 options on a vsphere target"),
        ("{at: 1s, kind: host-kill, restart: {model: ha, boot: 40s}}", "faults[0].restart.boot",
         "a VM boots by itself"),
        ("{at: 1s, kind: zone-outage, way: isolate, select: {zone: C1}, duration: 5s}",
         "faults[0].way", "zone-outage on vsphere takes way: kill"),
    ],
)  # fmt: skip
def test_what_vsphere_cannot_do_is_refused_naming_the_field(
    fault: str, where: str, says: str
) -> None:
    message = error_of(f"  - {fault}\n")
    assert message.startswith("exp.yaml:")
    assert f"{where}: " in message and says in message


@pytest.mark.parametrize(
    ("vsphere", "where", "says"),
    [
        ("    vms: {by: map}\n", "vms.map", "by: map needs `map`"),
        ("    vms: {by: name}\n", "vms.name", "by: name needs `name`"),
        ("    vms: {name: 'x-{host}'}\n", "vms.name", "used with by: name, not by: guest"),
        ("    vms: {by: name, name: 'x-{ip}'}\n", "vms.name", "unknown placeholder {ip}"),
        ("    vms: {by: map, map: {db1: vm1}}\n", "vms.map.db1", "host:port"),
        ("    insecure: true\n    ca_file: ca.pem\n", "ca_file", "drop one"),
        ("    task_timeout: 0s\n", "task_timeout", "more than 0"),
    ],
)  # fmt: skip
def test_bad_target_sections_are_refused_naming_the_field(
    vsphere: str, where: str, says: str
) -> None:
    message = error_of("  - {at: 1s, kind: stepdown}\n", vsphere)
    assert f"target.vsphere.{where}: " in message and says in message


def test_a_password_pasted_into_password_env_is_refused_without_being_echoed() -> None:
    message = error_of("  - {at: 1s, kind: stepdown}\n", "    password_env: 'Tr0ub4dor&3'\n")
    assert "password_env: must be the NAME of an environment variable" in message
    assert "Tr0ub4dor" not in message


def test_a_password_field_is_not_accepted() -> None:
    message = error_of("  - {at: 1s, kind: stepdown}\n", "    password: hunter22\n")
    assert "target.vsphere.password: unknown key; did you mean 'password_env'?" in message
    assert "hunter22" not in message


def test_vcenter_host_is_a_name_not_a_url() -> None:
    head = HEAD.replace("host: vc.example.com", "host: https://vc.example.com/sdk")
    with pytest.raises(ExperimentError, match=r"target.vsphere.host: the vCenter's name or "
                       r"address only \(no https://"):  # fmt: skip
        load_experiment_text(head.format(vsphere="") + "  - {at: 1s, kind: stepdown}\n",
                             "exp.yaml", {})  # fmt: skip


def test_validating_needs_no_vsphere_library() -> None:
    """The schema loads without pyVmomi: it is imported by the injector package only."""
    import subprocess
    import sys

    code = ("import sys; import rsdrill.experiment.schema, rsdrill.platforms.vsphere.injectors; "
            "assert 'pyVmomi' not in sys.modules, 'pyVmomi imported'")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_plan_names_the_connection_mapping_and_privileges_but_no_password() -> None:
    exp = load(
        "  - {at: 1s, kind: host-kill, scope: host, restart: {after: 20s},"
        " vsphere: {restart_on: other}}\n"
        "  - {at: 1s, kind: network-partition, duration: 5s}\n",
        vsphere="    password_env: VC_PASS\n    insecure: true\n",
    )
    plan = render_plan(exp)
    assert "vCenter vc.example.com:443 as rsdrill@vsphere.local, password from $VC_PASS; " \
        "TLS NOT verified (insecure: true)" in plan  # fmt: skip
    assert "members → VMs by their guest hostname or IP" in plan
    assert ("privileges needed: System.View, System.Read, VirtualMachine.Interact.PowerOff, "
            "VirtualMachine.Interact.PowerOn, Resource.ColdMigrate, "
            "VirtualMachine.Interact.DeviceConnection") in plan  # fmt: skip


@pytest.mark.parametrize(
    ("name", "topology", "restart_s"),
    [("vsphere-rs1-host-failure", "rs1", 15.0), ("vsphere-rs3-host-failure", "psa", 15.0)],
)
def test_catalog_host_failures_load_as_the_reference_architecture_ran(
    name: str, topology: str, restart_s: float
) -> None:
    from pathlib import Path

    from rsdrill.experiment.loader import load_experiment

    env = {"RSDRILL_URI": "mongodb://db1:27017/?replicaSet=rs0", "VSPHERE_HOST": "vc",
           "VSPHERE_USER": "ops"}  # fmt: skip
    exp = load_experiment(Path(__file__).parents[2] / "experiments" / f"{name}.yaml", env)
    assert exp.target.topology == topology
    assert exp.target.vsphere is not None and exp.target.vsphere.insecure is False
    (fault,) = exp.faults
    assert (fault.kind, fault.scope, fault.select, fault.revert_after) == (
        "host-kill",
        "host",
        "primary",
        restart_s,
    )
    assert fault.vsphere is not None and fault.vsphere.restart_on == "other"
    assert fault.restart and fault.restart.model == "ha"  # HA's restart, its phases measured
    assert exp.probes.availability is not None
    assert (exp.probes.availability.write_concern, exp.probes.availability.journal) == (1, True)


def test_the_ha_model_powers_the_vm_on_once_the_failure_is_detected() -> None:
    exp = load("  - {at: 1s, kind: host-kill, scope: host, restart: {model: ha, detect: 20s},"
               " vsphere: {restart_on: other}}\n")  # fmt: skip
    assert exp.faults[0].revert_after == 20
    plan = render_plan(exp)
    assert ("HA restarts it (detected after 20s): power on; the VM boots by itself, mongod "
            "starts on its kept data directory") in plan  # fmt: skip
