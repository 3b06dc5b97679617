"""govmomi's vCenter simulator (vcsim) on loopback for the vSphere tests: started once per
session on a free port with a user and a random password, stopped after (and by itself should
the test process die: it exits when its stdin closes); plus helpers that build member-like VMs
(a boot disk, a data disk, one network adapter, a guest hostname) with pyVmomi directly, the way
a user's vCenter would look."""

from __future__ import annotations

import secrets
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsdrill.platforms.sandbox.hosts import free_port_base
from tests.harness.processes import ensure_built, stop

ROOT = Path(__file__).resolve().parents[2]
VCSIM = ROOT / ".cache" / "tools" / "vcsim"
INSTALL = ROOT / ".ci" / "install-vcsim"
START_TIMEOUT_S = 30.0
USER = "rsdrill"
# ESXi hosts in the simulated cluster, as in the vSAN reference architecture.
HOSTS = 4
DATASTORE = "LocalDS_0"


@dataclass(frozen=True)
class Vcsim:
    host: str
    port: int
    user: str
    password: str
    log: Path


@contextmanager
def vcsim(log_path: Path, certificate: tuple[Path, Path] | None = None, *, clusters: int = 1,
          hosts: int = HOSTS, standalone: int = 0) -> Iterator[Vcsim]:  # fmt: skip
    """vcsim on 127.0.0.1 and a free port: one datacenter, one cluster of four ESXi hosts (or
    `clusters` of `hosts` each, DC0_C<i>_H<j>, and `standalone` hosts outside any cluster,
    DC0_H<j>), no VMs (the tests make their own), a user and a fresh random password; TLS with
    its own self-signed certificate, or with `certificate` (cert and key files)."""
    binary = ensure_built(VCSIM, INSTALL)
    port = free_port_base(1)
    password = "pw-" + secrets.token_urlsafe(18)
    args = [str(binary), "-l", f"127.0.0.1:{port}", "-username", USER, "-password", password,
            "-dc", "1", "-cluster", str(clusters), "-host", str(hosts),
            "-standalone-host", str(standalone), "-vm", "0", "-pool", "0",
            "-stdinexit"]  # fmt: skip
    if certificate is not None:
        args += ["-tlscert", str(certificate[0]), "-tlskey", str(certificate[1])]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vcsim did not start (see {log_path})")
            time.sleep(0.05)
        yield Vcsim("127.0.0.1", port, USER, password, log_path)
    finally:
        stop(proc)


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (it is its own CA) and its key, by openssl."""
    cert, key = directory / "vcenter.pem", directory / "vcenter-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    return cert, key


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def session_of(sim: Vcsim) -> Iterator[Any]:
    """The test's own pyVmomi session (`connect`), logged out on the way out."""
    from pyVim.connect import Disconnect

    opened = connect(sim)
    try:
        yield opened
    finally:
        Disconnect(opened)


def connect(sim: Vcsim) -> Any:
    """A pyVmomi session of the test's own (not rsdrill's), TLS unverified."""
    from pyVim.connect import SmartConnect

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return SmartConnect(host=sim.host, port=sim.port, user=sim.user, pwd=sim.password,
                        sslContext=context)  # fmt: skip


def wait_task(task: Any, timeout_s: float = 30.0) -> Any:
    from pyVmomi import vim

    deadline = time.monotonic() + timeout_s
    while task.info.state not in (vim.TaskInfo.State.success, vim.TaskInfo.State.error):
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task._moId} still {task.info.state}")
        time.sleep(0.05)
    if task.info.state == vim.TaskInfo.State.error:
        raise task.info.error
    return task.info.result


def esxi_hosts(si: Any) -> list[Any]:
    """The ESXi hosts, by name."""
    from pyVmomi import vim

    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True)
    try:
        return sorted(view.view, key=lambda h: h.name)
    finally:
        view.Destroy()


def find_vm(si: Any, name: str) -> Any:
    from pyVmomi import vim

    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return next(vm for vm in view.view if vm.name == name)
    finally:
        view.Destroy()


def create_vm(si: Any, name: str, host: Any, *, guest_hostname: str | None = None) -> Any:
    """A powered-on VM on `host`: "Hard disk 1" (boot, unit 0) and "Hard disk 2" (data,
    unit 1) on a paravirtual SCSI controller, and "Network adapter 1" connected to VM Network;
    the guest reports `guest_hostname` (vcsim sets guest properties through extraConfig)."""
    from pyVmomi import vim

    spec = vim.vm.device.VirtualDeviceSpec
    controller = vim.vm.device.ParaVirtualSCSIController(
        key=1000, busNumber=0, sharedBus=vim.vm.device.VirtualSCSIController.Sharing.noSharing
    )
    devices = [spec(operation=spec.Operation.add, device=controller)]
    for unit, label in ((0, "Hard disk 1"), (1, "Hard disk 2")):
        disk = vim.vm.device.VirtualDisk(
            key=-(unit + 1), controllerKey=1000, unitNumber=unit, capacityInKB=1024 * 1024,
            deviceInfo=vim.Description(label=label, summary=label),
            backing=vim.vm.device.VirtualDisk.FlatVer2BackingInfo(
                diskMode="persistent", thinProvisioned=True),
            # As vSphere reports every disk's (vcsim would leave it unset): unlimited.
            storageIOAllocation=vim.StorageResourceManager.IOAllocationInfo(limit=-1),
        )  # fmt: skip
        devices.append(spec(operation=spec.Operation.add,
                            fileOperation=spec.FileOperation.create, device=disk))  # fmt: skip
    nic = vim.vm.device.VirtualVmxnet3(
        key=-10, deviceInfo=vim.Description(label="Network adapter 1", summary="VM Network"),
        backing=vim.vm.device.VirtualEthernetCard.NetworkBackingInfo(deviceName="VM Network"),
        connectable=vim.vm.device.VirtualDevice.ConnectInfo(
            connected=True, startConnected=True, allowGuestControl=True),
    )  # fmt: skip
    devices.append(spec(operation=spec.Operation.add, device=nic))
    extra = []
    if guest_hostname:
        extra.append(vim.option.OptionValue(key="SET.guest.hostName", value=guest_hostname))
    config = vim.vm.ConfigSpec(
        name=name, guestId="otherLinux64Guest", numCPUs=1, memoryMB=256,
        files=vim.vm.FileInfo(vmPathName=f"[{DATASTORE}]"), deviceChange=devices,
        extraConfig=extra,
    )  # fmt: skip
    datacenter = si.RetrieveContent().rootFolder.childEntity[0]
    vm = wait_task(datacenter.vmFolder.CreateVM_Task(config, host.parent.resourcePool, host))
    wait_task(vm.PowerOnVM_Task())
    return vm


def datastore_files(si: Any, folder: str) -> list[str]:
    """The files in a folder of the datastore (what survives a disk's removal)."""
    from pyVmomi import vim

    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.Datastore], True)
    try:
        datastore = next(d for d in view.view if d.name == DATASTORE)
    finally:
        view.Destroy()
    search = vim.host.DatastoreBrowser.SearchSpec(matchPattern=["*"])
    result = wait_task(datastore.browser.SearchDatastore_Task(f"[{DATASTORE}] {folder}", search))
    return sorted(f.path for f in result.file)
