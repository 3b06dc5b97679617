"""`cpu-starve` and `memory-pressure` on a member process of this machine, through a cgroup v1
child of the member's own cgroup (this kernel mounts cpu and memory as v1 hierarchies):

- cpu-starve: `cpu.cfs_quota_us` caps the member at `cpu_share` of one CPU per 100 ms period;
  its threads run only that long each period, so every request waits (latency rises);
- memory-pressure: the member moves to the child (what it holds stays charged where it was:
  this kernel refuses `move_charge_at_immigrate`), `memory.limit_in_bytes` is set to the
  child's usage plus `memory_limit_mb`, and a neighbour
  process in the same cgroup allocates until the limit: the kernel's OOM killer then takes the
  member (its oom_score_adj raised to 1000, so the choice is the member, as mongod, the biggest
  process, is on a host out of memory). The set fails over as for a host-kill; revert stops
  the neighbour and restarts the member.

The child is made under the cgroup the member is in (never above it), so whatever limits that
cgroup has still hold. Revert moves the member back and removes the child; the journal's
`cgroup-leave` action does the same (and restarts a member the OOM killer took).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsdrill.platforms.base import InjectionError, Injector, MachineTarget, ProcessHosts

if TYPE_CHECKING:
    from rsdrill.faults import CpuStarveFault, MemoryPressureFault

PERIOD_US = 100_000
CONTROLLERS = {"cpu-starve": "cpu", "memory-pressure": "memory"}


def mount_of(controller: str) -> Path:
    """Where the cgroup v1 hierarchy of `controller` is mounted."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup" and controller in fields[3].split(","):
            return Path(fields[1])
    raise InjectionError(f"no cgroup v1 {controller} hierarchy is mounted (/proc/mounts)")


def cgroup_of(pid: int, controller: str) -> str:
    """The path of `pid`'s cgroup in the `controller` hierarchy (from /proc/<pid>/cgroup)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    raise InjectionError(f"process {pid} is in no {controller} cgroup")


def settings_for(fault: CpuStarveFault | MemoryPressureFault) -> dict[str, str]:
    """The cgroup files and values that make the fault."""
    if fault.kind == "cpu-starve":
        quota = max(int(fault.cpu_share * PERIOD_US), 1000)  # the kernel's floor is 1 ms
        return {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": str(quota)}
    return {"memory.limit_in_bytes": str(int(fault.memory_limit_mb * 1024 * 1024))}


# The neighbour: takes 1 MiB every 10 ms and keeps it, until it is killed.
_NEIGHBOUR = (
    "import time\nheld = []\nwhile True:\n    held.append(bytearray(1 << 20))\n"
    "    time.sleep(0.01)\n"
)


def leave(action: dict[str, Any]) -> str:
    """Revert action `cgroup-leave`: the neighbour (if any) stopped, the member back in its
    cgroup, the child removed."""
    root = Path(action["mount"])
    group = root / action["group"].lstrip("/")
    original = root / action["original"].lstrip("/")
    moved = 0
    if group.exists():
        for pid in map(int, (group / "cgroup.procs").read_text().split()):
            if _is_neighbour(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for pid in (group / "cgroup.procs").read_text().split():
            try:
                (original / "cgroup.procs").write_text(pid)
                moved += 1
            except ProcessLookupError:
                pass
        for _ in range(50):  # a process just killed leaves the group a moment later
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.02)
    done = f"{action['host']}: {moved} process(es) back in {action['original']}"
    return done + ("" if not group.exists() else f"; {group} still there")


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, killed and not yet reaped, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False


def _is_neighbour(pid: int) -> bool:
    try:
        return "rsdrill-memory-neighbour" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


class CgroupFault:
    """cpu-starve or memory-pressure on one member process."""

    def __init__(self, kind: str, hosts: ProcessHosts, host: str, settings: dict[str, str],
                 restart_action: dict[str, object]) -> None:  # fmt: skip
        self.kind = kind
        self.hosts = hosts
        self.target = host
        self.settings = settings
        self.controller = CONTROLLERS[kind]
        self.restart = restart_action
        self._action: dict[str, Any] | None = None
        self._neighbour: subprocess.Popen[bytes] | None = None

    def describe(self) -> str:
        shown = ", ".join(f"{k} {v}" for k, v in self.settings.items())
        return f"{self.target} into a {self.controller} cgroup of its own: {shown}"

    def _plan(self) -> dict[str, Any]:
        if self._action is None:
            pid = self.hosts.pid(self.target)
            if pid is None:
                raise InjectionError(f"{self.kind}: {self.target} is not running")
            original = cgroup_of(pid, self.controller)
            port = self.target.rsplit(":", 1)[1]
            group = f"{original.rstrip('/')}/rsdrill-{port}"
            self._action = {"action": "cgroup-leave", "host": self.target, "pid": pid,
                            "mount": str(mount_of(self.controller)), "original": original,
                            "group": group, "restart": self.restart}  # fmt: skip
        return self._action

    def revert_action(self) -> dict[str, Any] | None:
        return self._plan()

    def inject(self) -> None:
        action = self._plan()
        group = Path(action["mount"]) / action["group"].lstrip("/")
        try:
            group.mkdir(exist_ok=True)
            if self.kind == "cpu-starve":
                for name, value in self.settings.items():
                    (group / name).write_text(value)
            (group / "cgroup.procs").write_text(str(action["pid"]))
            if self.kind == "memory-pressure":
                headroom = int(self.settings["memory.limit_in_bytes"])
                used = int((group / "memory.usage_in_bytes").read_text())
                (group / "memory.limit_in_bytes").write_text(str(used + headroom))
                Path(f"/proc/{action['pid']}/oom_score_adj").write_text("1000")
                self._start_neighbour(group)
        except OSError as exc:
            raise InjectionError(f"{self.kind} on {self.target}: {group}: {exc}") from exc

    def _start_neighbour(self, group: Path) -> None:
        neighbour = subprocess.Popen(
            [sys.executable, "-c", _NEIGHBOUR, "rsdrill-memory-neighbour"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._neighbour = neighbour
        try:
            (group / "cgroup.procs").write_text(str(neighbour.pid))
        except OSError:
            neighbour.kill()
            raise

    def verify(self, timeout_s: float) -> bool:
        """cpu-starve: the member is in the group; memory-pressure: the OOM killer took it."""
        action = self._plan()
        if self.kind == "cpu-starve":
            return cgroup_of(action["pid"], self.controller) == action["group"]
        deadline = time.monotonic() + timeout_s
        while _running(action["pid"]):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def revert(self) -> None:
        action = self._plan()
        leave(action)
        if self._neighbour is not None:
            self._neighbour.wait(5)
        # The OOM killer's victim comes back as a restarted host does.
        self.hosts.start(self.target, wipe=False)


def cgroup_fault(
    target: MachineTarget, fault: CpuStarveFault | MemoryPressureFault, host: str
) -> Injector:
    """cpu-starve or memory-pressure of a member process, through a cgroup of its own."""
    return CgroupFault(fault.kind, target.hosts, host, settings_for(fault),
                       target.hosts.restart_action(host, wipe=False))  # fmt: skip
