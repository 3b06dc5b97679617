"""The harness itself: what rsdrill does to a vcsim VM happens to the sandbox member bound to it
(suspend freezes it, a removed data disk takes it down, and both come back on revert)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.injectors import vm_injector
from harness.vcsim import Vcsim, create_vm, esxi_hosts, wait_task
from harness.vsphere_binding import VmBinding

from rsdrill.connection import ConnectOptions, answers_hello
from rsdrill.experiment.schema import make_fault
from rsdrill.platforms.vsphere.injectors import Vsphere
from rsdrill.platforms.vsphere.options import MemberVms, VspherePlatform
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology

# The sandbox members here use neither TLS nor a login.
PLAIN = ConnectOptions()


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_suspend_and_disk_removal_reach_the_bound_member(
    sim: Vcsim, si: Any, client: Vsphere, platform: Callable[..., VspherePlatform],
    sandbox_dir: Path, free_port_base: Callable[[int], int],
) -> None:  # fmt: skip
    sandbox = up(sandbox_dir, build_topology("rs1", port_base=free_port_base(1)),
                 EmulatorEngine())  # fmt: skip
    member = sandbox.spec.members[0]
    vm = create_vm(si, f"bound-{member.port}", esxi_hosts(si)[0])
    by_map = platform(vms=MemberVms(by="map", map={member.host: vm.name}))
    try:
        with VmBinding(sim, sandbox, {vm._moId: member.host}) as binding:
            freeze = vm_injector(client, by_map, make_fault(at=0, kind="host-freeze",
                                                       duration=1), member.host)  # fmt: skip
            freeze.inject()
            assert wait_for(lambda: not answers_hello(member.host, timeout_s=0.2, options=PLAIN))
            assert sandbox.pid(member) is not None  # frozen, not dead
            freeze.revert()
            assert wait_for(lambda: answers_hello(member.host, options=PLAIN))

            detach = vm_injector(client, by_map, make_fault(
                at=0, kind="volume-detach", duration=1, vsphere={"disk": "Hard disk 2"}
            ), member.host)  # fmt: skip
            detach.inject()
            assert wait_for(lambda: sandbox.pid(member) is None)
            detach.revert()
            assert wait_for(lambda: answers_hello(member.host, options=PLAIN))
        assert binding.errors == []
        assert [e.what for e in binding.events] == [
            "SIGSTOP (VM suspended)", "SIGCONT (VM resumed)",
            "SIGKILL (data disk removed)", "restart (VM on, data disk attached)", "answering",
        ]  # fmt: skip
    finally:
        wait_task(vm.PowerOffVM_Task())
