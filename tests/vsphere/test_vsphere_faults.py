"""Every vSphere fault round-trips against vcsim: the VM's real state (read through the test's own
session) is checked after inject and after revert, reverts are repeatable, and the journaled
revert actions work from the journal alone.

What vcsim lacks, and is therefore not exercised here: permission checks (vcsim grants every
call: NoPermission is covered by test_no_permission_message with the fault object pyVmomi
would raise), and PowerOnVM_Task's `host` argument (vcsim ignores it; rsdrill moves a VM with
RelocateVM_Task before powering it on, which vcsim honours).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import PASSWORD_ENV, MemberVm
from harness.injectors import vm_injector
from harness.vcsim import Vcsim, datastore_files, esxi_hosts, wait_task

from rsdrill.engine.journal import Journal
from rsdrill.experiment.schema import Fault, make_fault
from rsdrill.platforms.base import Injector, TargetError
from rsdrill.platforms.vsphere.injectors import REVERT_ACTIONS, Vsphere, VsphereError
from rsdrill.platforms.vsphere.options import MemberVms, VspherePlatform
from tests.harness.cli import rsdrill_run

ROOT = Path(__file__).resolve().parents[2]


def fault(kind: str, **fields: Any) -> Fault:
    defaults: dict[str, Any] = {"at": 0}
    if kind == "host-kill":
        defaults["restart"] = {"after": 1}
    elif kind != "stepdown":
        defaults["duration"] = 1
    return make_fault(kind=kind, **{**defaults, **fields})


def injector(client: Vsphere, platform: VspherePlatform, member: str, kind: str,
             **fields: Any) -> Injector:  # fmt: skip
    return vm_injector(client, platform, fault(kind, **fields), member)


def disk(vm: Any, unit: int) -> Any:
    from pyVmomi import vim

    found = [d for d in vm.config.hardware.device
             if isinstance(d, vim.vm.device.VirtualDisk) and d.unitNumber == unit]  # fmt: skip
    return found[0] if found else None


def set_limit(vm: Any, unit: int, limit: int) -> None:
    from pyVmomi import vim

    device = disk(vm, unit)
    device.storageIOAllocation = vim.StorageResourceManager.IOAllocationInfo(limit=limit)
    change = vim.vm.device.VirtualDeviceSpec(operation="edit", device=device)
    wait_task(vm.ReconfigVM_Task(vim.vm.ConfigSpec(deviceChange=[change])))


def assert_no_secret(sim: Vcsim, *texts: str) -> None:
    for text in texts:
        assert sim.password not in text


def test_host_kill_powers_off_and_back_on(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
    sim: Vcsim,
) -> None:  # fmt: skip
    target = member_vm()
    kill = injector(client, platform(), target.member, "host-kill")
    action = kill.revert_action()
    assert action is not None and action["action"] == "vsphere.power-on"
    assert action["vms"][0]["moref"] == target.vm._moId
    assert action["vcenter"]["password_env"] is None  # the default variable names are used
    assert_no_secret(sim, json.dumps(action), kill.describe())
    kill.inject()
    assert target.vm.runtime.powerState == "poweredOff"
    assert kill.verify(5)
    kill.revert()
    assert target.vm.runtime.powerState == "poweredOn"
    kill.revert()  # repeatable: a second revert finds it on and leaves it alone
    assert target.vm.runtime.powerState == "poweredOn"
    assert "already on" in REVERT_ACTIONS["vsphere.power-on"](action)


def test_host_kill_without_restart_has_nothing_to_revert(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
) -> None:  # fmt: skip
    target = member_vm()
    kill = injector(client, platform(), target.member, "host-kill", restart=False)
    assert kill.revert_action() is None
    assert "stay off" in kill.describe()


def test_host_failure_powers_off_every_vm_of_the_esxi_host_and_restarts_them_elsewhere(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
    si: Any,
) -> None:  # fmt: skip
    # ESXi host 3 runs the member, two more VMs, and one already off; host 2 runs a bystander.
    target, neighbours = member_vm(host=3), [member_vm(host=3), member_vm(host=3)]
    already_off, bystander = member_vm(host=3, power_on=False), member_vm(host=2)
    failed = esxi_hosts(si)[3]
    failure = injector(client, platform(), target.member, "host-kill", scope="host",
                       vsphere={"restart_on": "other"})  # fmt: skip
    assert failed.name in failure.describe()
    failure.inject()
    hit = [target, *neighbours]
    assert [m.vm.runtime.powerState for m in hit] == ["poweredOff"] * 3
    assert bystander.vm.runtime.powerState == "poweredOn"
    assert failure.verify(5)
    failure.revert()
    assert [m.vm.runtime.powerState for m in hit] == ["poweredOn"] * 3
    # Restarted on the other hosts in turn, as HA would spread them; never on the failed one.
    assert {m.vm.runtime.host.name for m in hit} == {h.name for h in esxi_hosts(si)[:3]}
    assert already_off.vm.runtime.powerState == "poweredOff"
    assert already_off.vm.runtime.host == failed


def test_host_freeze_suspends_and_resumes(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
) -> None:  # fmt: skip
    target = member_vm()
    freeze = injector(client, platform(), target.member, "host-freeze")
    freeze.inject()
    assert target.vm.runtime.powerState == "suspended"
    assert freeze.verify(5)
    freeze.revert()
    assert target.vm.runtime.powerState == "poweredOn"


def test_freezing_a_powered_off_vm_is_a_clear_invalid_power_state(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
) -> None:  # fmt: skip
    target = member_vm(power_on=False)
    freeze = injector(client, platform(), target.member, "host-freeze")
    with pytest.raises(VsphereError) as error:
        freeze.inject()
    assert str(error.value) == (f"InvalidPowerState: suspend VM {target.vm.name} "
                                f"({target.vm._moId}): the VM is poweredOff, the call needs "
                                "poweredOn")  # fmt: skip


def test_volume_detach_removes_the_disk_keeps_its_file_and_adds_it_back(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
    si: Any,
) -> None:  # fmt: skip
    target = member_vm()
    set_limit(target.vm, 1, 400)  # the disk's own settings come back with it
    data = disk(target.vm, 1).backing.fileName
    folder = target.vm.name
    files = datastore_files(si, folder)
    detach = injector(client, platform(), target.member, "volume-detach",
                      vsphere={"disk": "Hard disk 2"})  # fmt: skip
    detach.inject()
    assert disk(target.vm, 1) is None
    assert disk(target.vm, 0) is not None  # the boot disk stays
    assert datastore_files(si, folder) == files  # the data disk's file is kept
    assert detach.verify(5)
    detach.revert()
    back = disk(target.vm, 1)
    assert back.backing.fileName == data
    assert back.storageIOAllocation.limit == 400
    detach.revert()  # repeatable: the file is attached already
    assert [d.unitNumber for d in [disk(target.vm, 0), disk(target.vm, 1)]] == [0, 1]


def test_data_disk_by_unit_number_and_clear_errors_when_ambiguous(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
) -> None:  # fmt: skip
    target = member_vm()
    by_unit = injector(client, platform(), target.member, "volume-detach", vsphere={"disk": 1})
    assert "Hard disk 2" in by_unit.describe()
    with pytest.raises(VsphereError, match=r"NoDisk: .* has 2 disks \(Hard disk 1 \(unit 0\), "
                       r"Hard disk 2 \(unit 1\)\): say which"):  # fmt: skip
        injector(client, platform(), target.member, "volume-detach")
    with pytest.raises(VsphereError, match="has no disk 'Hard disk 9'"):
        injector(client, platform(), target.member, "iops-throttle", iops=10,
                 vsphere={"disk": "Hard disk 9"})  # fmt: skip


@pytest.mark.parametrize("original", [-1, 750])
def test_iops_limit_is_set_and_the_original_restored_exactly(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
    original: int,
) -> None:  # fmt: skip
    target = member_vm()
    set_limit(target.vm, 1, original)
    throttle = injector(client, platform(), target.member, "iops-throttle", iops=100,
                        vsphere={"disk": "Hard disk 2"})  # fmt: skip
    action = throttle.revert_action()
    assert action is not None and action["limit"] == original
    throttle.inject()
    assert disk(target.vm, 1).storageIOAllocation.limit == 100
    assert disk(target.vm, 0).storageIOAllocation.limit == -1  # the boot disk is untouched
    assert throttle.verify(5)
    throttle.revert()
    assert disk(target.vm, 1).storageIOAllocation.limit == original
    assert "already at" in REVERT_ACTIONS["vsphere.set-iops-limit"](action)


def test_network_partition_disconnects_and_reconnects_the_adapter(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
) -> None:  # fmt: skip
    from pyVmomi import vim

    target = member_vm()

    def connected() -> list[bool]:
        return [n.connectable.connected for n in target.vm.config.hardware.device
                if isinstance(n, vim.vm.device.VirtualEthernetCard)]  # fmt: skip

    partition = injector(client, platform(), target.member, "network-partition")
    assert "Network adapter 1" in partition.describe()
    partition.inject()
    assert connected() == [False]
    assert partition.verify(5)
    partition.revert()
    assert connected() == [True]
    action = partition.revert_action()
    assert action is not None
    assert "already connected" in REVERT_ACTIONS["vsphere.connect-nics"](action)


def test_members_found_by_name_pattern_and_by_map(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
) -> None:  # fmt: skip
    target = member_vm()
    short = target.member.split(".")[0]
    by_name = platform(vms=MemberVms(by="name", name="{short}"))
    assert target.vm._moId in injector(client, by_name, target.member, "host-freeze").describe()
    by_map = platform(vms=MemberVms(by="map", map={"db9:27017": target.vm.name}))
    assert target.vm._moId in injector(client, by_map, "db9:27017", "host-freeze").describe()
    with pytest.raises(VsphereError, match="NotMapped: member other:27017 is not in"):
        injector(client, by_map, "other:27017", "host-freeze")
    assert short  # the guest reports the FQDN; {short} is its first label


def test_missing_vm_is_a_clear_error(
    client: Vsphere, platform: Callable[..., VspherePlatform], sim: Vcsim,
) -> None:  # fmt: skip
    with pytest.raises(VsphereError) as error:
        injector(client, platform(), "nowhere.example.com:27017", "host-kill")
    text = str(error.value)
    assert text.startswith("NotFound: member nowhere.example.com:27017: no VM whose guest "
                           f"hostname or IP address is nowhere.example.com on {sim.host}:"
                           f"{sim.port}")  # fmt: skip
    assert "VMware Tools" in text


def test_wrong_password_is_a_clear_error_without_the_password(
    platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm], sim: Vcsim,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from rsdrill.platforms.vsphere.injectors import connection

    target = member_vm()
    wrong = sim.password[::-1]
    monkeypatch.setenv("MY_VC_PASSWORD", wrong)
    session = Vsphere(connection(platform(password_env="MY_VC_PASSWORD")))
    with pytest.raises(VsphereError) as error:
        injector(session, platform(), target.member, "host-kill")
    text = str(error.value)
    assert text == (
        f"InvalidLogin: login to {sim.host}:{sim.port} as {sim.user}: user "
        f"{sim.user}, password from $MY_VC_PASSWORD (wrong user or password)"
    )
    assert wrong not in text and sim.password not in text
    monkeypatch.delenv("MY_VC_PASSWORD")
    with pytest.raises(VsphereError, match=r"NoPassword: .* environment variable "
                       r"MY_VC_PASSWORD, which is not set"):  # fmt: skip
        Vsphere(connection(platform(password_env="MY_VC_PASSWORD"))).root()


def test_tls_is_verified_unless_insecure_is_set(platform: Callable[..., VspherePlatform]) -> None:
    from rsdrill.platforms.vsphere.injectors import connection

    session = Vsphere(connection(platform(insecure=False)))
    with pytest.raises(VsphereError, match=r"TLS: .* the certificate of 127\.0\.0\.1:\d+ is "
                       r"not trusted \(self.signed certificate\); give the CA in "
                       r"`ca_file`"):  # fmt: skip
        session.root()


def test_a_vm_gone_since_the_fault_is_a_clear_error_and_the_others_still_come_back(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
) -> None:  # fmt: skip
    target, neighbour = member_vm(host=1), member_vm(host=1)
    failure = injector(client, platform(), target.member, "host-kill", scope="host")
    failure.inject()
    action = failure.revert_action()
    assert action is not None and action["vms"][0]["name"] == target.vm.name
    wait_task(target.vm.Destroy_Task())
    with pytest.raises(TargetError, match=r"vsphere.power-on: ManagedObjectNotFound: VM m-\w+ "
                       r"\(vm-\d+\) \(uuid [-\w]+\) no longer exists"):  # fmt: skip
        REVERT_ACTIONS["vsphere.power-on"](action)
    assert neighbour.vm.runtime.powerState == "poweredOn"


def test_no_permission_message() -> None:
    """vcsim grants every call, so the fault pyVmomi raises is built here."""
    from pyVmomi import vim

    from rsdrill.platforms.vsphere.injectors import Connection

    session = Vsphere(Connection("vc.example.com", "ops@vsphere.local"))
    vm = vim.VirtualMachine("vm-42")
    fault = vim.fault.NoPermission(privilegeId="VirtualMachine.Interact.PowerOff", object=vm)
    assert str(session.explain(fault, "power off VM db1 (vm-42)")) == (
        "NoPermission: power off VM db1 (vm-42): privilege VirtualMachine.Interact.PowerOff is "
        "missing on VirtualMachine vm-42 (the user's role lacks this privilege (see "
        "docs/platforms/vsphere.md))"
    )


def test_recover_carries_out_the_journaled_action_after_a_crash(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
    journal_home: Path, sim: Vcsim, si: Any,
) -> None:  # fmt: skip
    """A run that died with faults in force: its journal alone brings every VM back."""
    kill, detach, throttle, partition = member_vm(), member_vm(), member_vm(), member_vm()
    zone = member_vm()
    set_limit(throttle.vm, 1, 250)
    injectors = [
        injector(client, platform(), kill.member, "host-kill"),
        injector(client, platform(), detach.member, "volume-detach", vsphere={"disk": 1}),
        injector(client, platform(), throttle.member, "iops-throttle", iops=20,
                 vsphere={"disk": 1}),
        injector(client, platform(), partition.member, "network-partition"),
        injector(client, platform(), zone.member, "zone-outage", way="kill",
                 select={"zone": "DC0_C0"}),
    ]  # fmt: skip
    # As the runner does: each revert action on disk before the fault; then the run dies.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    journal = Journal(journal_home / "journal" / "crashed-vsphere-run.jsonl")
    journal.write("run", run="crashed-vsphere-run", experiment="vsphere-faults", pid=dead.pid)
    for i, one in enumerate(injectors):
        journal.write("intent", key=f"fault:{i}:{one.target}", kind=one.kind, target=one.target,
                      revert=one.revert_action())  # fmt: skip
        one.inject()
        journal.write("applied", key=f"fault:{i}:{one.target}")
    journal.close()
    client.close()
    assert kill.vm.runtime.powerState == "poweredOff" and disk(detach.vm, 1) is None
    assert zone.vm.runtime.powerState == "poweredOff"
    done = rsdrill_run(
        ["recover"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert kill.vm.runtime.powerState == "poweredOn"
    assert zone.vm.runtime.powerState == "poweredOn"
    assert disk(detach.vm, 1) is not None
    assert disk(throttle.vm, 1).storageIOAllocation.limit == 250
    assert all(n.connectable.connected for n in partition.vm.config.hardware.device
               if hasattr(n, "macAddress"))  # fmt: skip
    journal_text = (journal_home / "journal" / "crashed-vsphere-run.jsonl").read_text()
    assert "password_env" in journal_text
    assert_no_secret(sim, output, journal_text)


def test_a_task_that_never_ends_is_given_up_at_its_deadline() -> None:
    """vcsim finishes every task at once, so a task stuck in `running` is a stand-in here."""
    from types import SimpleNamespace

    from rsdrill.platforms.vsphere.injectors import Connection

    session = Vsphere(Connection("vc.example.com", "ops", task_timeout=0.3))
    stuck = SimpleNamespace(_moId="task-981", info=SimpleNamespace(state="running"))
    done = SimpleNamespace(_moId="task-982", info=SimpleNamespace(state="success", result=7))
    with pytest.raises(VsphereError) as error:
        session.run_tasks("power off", [("VM a (vm-1)", done), ("VM b (vm-2)", stuck)])
    assert str(error.value) == ("TaskTimeout: power off: not finished within 0.3s: VM b (vm-2) "
                                "(task-981) (the task may still complete in vCenter)")  # fmt: skip
    assert session.run_tasks("power off", [("VM a (vm-1)", done)]) == [7]


def test_revert_logs_in_again_when_the_session_has_expired(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
    si: Any,
) -> None:  # fmt: skip
    """vCenter ends idle sessions (30 minutes by default): a long fault must still revert."""
    target = member_vm()
    kill = injector(client, platform(), target.member, "host-kill")
    kill.inject()
    session = client.content.sessionManager.currentSession.key
    si.RetrieveContent().sessionManager.TerminateSession([session])
    kill.revert()
    assert target.vm.runtime.powerState == "poweredOn"
    assert client.content.sessionManager.currentSession.key != session


def test_tls_verified_against_the_given_ca_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vCenter whose certificate the given CA signed: verified, connected, no opt-out."""
    from harness.vcsim import make_certificate, vcsim

    from rsdrill.platforms.vsphere.injectors import Connection

    cert, key = make_certificate(tmp_path)
    with vcsim(tmp_path / "vcsim.log", certificate=(cert, key)) as own:
        monkeypatch.setenv(PASSWORD_ENV, own.password)
        verified = Vsphere(Connection(own.host, own.user, own.port, ca_file=str(cert)))
        try:
            assert "govmomi simulator" in verified.content.about.fullName
        finally:
            verified.close()
        other = tmp_path / "other"
        other.mkdir()
        wrong_ca = Vsphere(Connection(own.host, own.user, own.port,
                                      ca_file=str(make_certificate(other)[0])))  # fmt: skip
        with pytest.raises(VsphereError, match=r"TLS: .* is not trusted"):
            wrong_ca.root()


def test_members_found_by_guest_hostname_or_ip_and_ambiguity_refused(
    client: Vsphere, platform: Callable[..., VspherePlatform], member_vm: Callable[..., MemberVm],
) -> None:  # fmt: skip
    from pyVmomi import vim

    first, second = member_vm(), member_vm()
    short = first.member.split(".")[0]
    assert first.vm._moId in injector(client, platform(), f"{short}:27017",
                                      "host-freeze").describe()  # fmt: skip
    address = f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250)}"
    for vm in (first.vm, second.vm):
        wait_task(vm.ReconfigVM_Task(vim.vm.ConfigSpec(extraConfig=[
            vim.option.OptionValue(key="SET.guest.ipAddress", value=address)])))  # fmt: skip
    with pytest.raises(VsphereError) as error:
        injector(client, platform(), f"{address}:27017", "host-freeze")
    assert str(error.value).startswith(f"Ambiguous: member {address}:27017: several VMs whose "
                                       f"guest hostname or IP address is {address}")  # fmt: skip
    assert first.vm.name in str(error.value) and second.vm.name in str(error.value)
    wait_task(second.vm.ReconfigVM_Task(vim.vm.ConfigSpec(extraConfig=[
        vim.option.OptionValue(key="SET.guest.ipAddress", value="10.255.255.254")])))  # fmt: skip
    assert first.vm._moId in injector(client, platform(), f"{address}:27017",
                                      "host-freeze").describe()  # fmt: skip
