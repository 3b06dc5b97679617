"""Binds vcsim VMs to sandbox members, so that what rsdrill does to a VM through vCenter happens
to the member it stands for, and the catalog's vSphere experiments measure real outages.

A property-collector watch (WaitForUpdatesEx) on each VM's power state and devices drives its
member's process:

| the VM | the member |
|---|---|
| poweredOff (a hard power-off, or its ESXi host failing) | SIGKILL |
| suspended | SIGSTOP |
| poweredOn again | restarted on its kept data once booted (`boot_s`); SIGCONT after a suspend |
| its data disk removed | SIGKILL: its data is unreachable (mongod aborts on its first I/O error) |
| its data disk back (VM on) | restarted on its kept data |

Every change is also recorded with its monotonic time, so a test can compare the member's
outage with what the VM went through.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from harness.vcsim import Vcsim, connect
from rsdrill.connection import ConnectOptions, answers_hello
from rsdrill.sandbox.cluster import Sandbox, SandboxError

_WAIT_S = 1  # each WaitForUpdatesEx returns after at most this long, to notice stop()
_ANSWER_TIMEOUT_S = 30  # a booted member's start, at most


@dataclass
class _Bound:
    member: str
    data_file: str
    # Unknown until the watch's first update, which only records the state it finds.
    power: str | None = None
    has_disk: bool = True


@dataclass
class Event:
    at: float
    member: str
    what: str


@dataclass
class VmBinding:
    """`vms`: VM managed-object id → member host:port; each VM's data disk is the one at unit
    number 1 ("Hard disk 2"). `boot_s`: a VM powered on boots this long before its member
    starts (its process sleeps, then becomes the member: the sandbox's booting start)."""

    sim: Vcsim
    sandbox: Sandbox
    vms: dict[str, str]
    boot_s: float = 0.0
    events: list[Event] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> VmBinding:
        from pyVmomi import vim, vmodl

        self._si = connect(self.sim)
        self._bound: dict[str, _Bound] = {}
        objects = []
        for moref, member in self.vms.items():
            vm = vim.VirtualMachine(moref, self._si._stub)
            data = next(d for d in vm.config.hardware.device
                        if isinstance(d, vim.vm.device.VirtualDisk)
                        and d.unitNumber == 1)  # fmt: skip
            self._bound[moref] = _Bound(member, data.backing.fileName)
            objects.append(vmodl.query.PropertyCollector.ObjectSpec(obj=vm))
        spec = vmodl.query.PropertyCollector.FilterSpec(
            objectSet=objects,
            propSet=[vmodl.query.PropertyCollector.PropertySpec(
                type=vim.VirtualMachine,
                pathSet=["runtime.powerState", "config.hardware.device"])],
        )  # fmt: skip
        collector = self._si.RetrieveContent().propertyCollector
        self._collector = collector.CreatePropertyCollector()
        self._collector.CreateFilter(spec, partialUpdates=False)
        self._thread = threading.Thread(target=self._watch, name="vm-binding", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=_WAIT_S + 30)
        from pyVim.connect import Disconnect

        Disconnect(self._si)

    def _watch(self) -> None:
        from pyVmomi import vmodl

        options = vmodl.query.PropertyCollector.WaitOptions(maxWaitSeconds=_WAIT_S)
        version = ""
        while not self._stop.is_set():
            try:
                update = self._collector.WaitForUpdatesEx(version, options)
            except Exception as exc:  # the test fails on any error (see `errors`)
                self.errors.append(f"WaitForUpdatesEx: {exc!r}")
                return
            if update is None:
                continue
            version = update.version
            for filter_set in update.filterSet:
                for change in filter_set.objectSet:
                    bound = self._bound[change.obj._moId]
                    values = {c.name: c.val for c in change.changeSet}
                    try:
                        self._apply(bound, values)
                    except SandboxError as exc:
                        self.errors.append(f"{bound.member}: {exc}")

    def _apply(self, bound: _Bound, values: dict[str, Any]) -> None:
        from pyVmomi import vim

        power: str | None = bound.power
        has_disk = bound.has_disk
        if "runtime.powerState" in values:
            power = str(values["runtime.powerState"])
        if "config.hardware.device" in values:
            has_disk = any(isinstance(d, vim.vm.device.VirtualDisk)
                           and d.backing.fileName == bound.data_file
                           for d in values["config.hardware.device"])  # fmt: skip
        if bound.power is None:
            bound.power, bound.has_disk = power or "poweredOn", has_disk
            return
        was_up = bound.power == "poweredOn" and bound.has_disk
        up = power == "poweredOn" and has_disk
        member = self.sandbox.spec.member(bound.member)
        if power == "suspended" and bound.power == "poweredOn" and bound.has_disk:
            self._record(bound.member, "SIGSTOP (VM suspended)")
            self.sandbox.stop(member)
        elif power == "poweredOn" and bound.power == "suspended" and has_disk:
            self._record(bound.member, "SIGCONT (VM resumed)")
            self.sandbox.cont(member)
        elif was_up and not up:
            why = "VM powered off" if power != "poweredOn" else "data disk removed"
            self._record(bound.member, f"SIGKILL ({why})")
            if self.sandbox.pid(member) is not None:
                self.sandbox.kill(member)
        elif up and not was_up:
            # A VM powered on boots first; a disk added back to a running VM does not.
            boot_s = self.boot_s if bound.power == "poweredOff" else 0.0
            self._record(bound.member, "restart (VM on, data disk attached)")
            if self.sandbox.pid(member) is None:
                self.sandbox.start(member, boot_s=boot_s)
            if boot_s > 0:
                threading.Thread(target=self._answering, args=(bound.member, boot_s),
                                 daemon=True).start()  # fmt: skip
            else:
                self._record(bound.member, "answering")
        bound.power, bound.has_disk = power, has_disk

    def _answering(self, member: str, boot_s: float) -> None:
        """Record when a booting VM's member answers (the watch goes on meanwhile)."""
        deadline = time.monotonic() + boot_s + _ANSWER_TIMEOUT_S
        while not answers_hello(member, timeout_s=0.2, options=ConnectOptions()):
            if time.monotonic() > deadline or self._stop.is_set():
                self.errors.append(f"{member}: not answering {boot_s:g}s after its VM booted")
                return
            time.sleep(0.02)
        self._record(member, "answering")

    def _record(self, member: str, what: str) -> None:
        self.events.append(Event(time.monotonic(), member, what))
