"""Where a command's CPU goes, by kind of process: runs the command (by default the README's
test command) and reads every process's CPU time from /proc each `--interval` seconds, then
prints the CPU seconds of each kind (emulator members, routers, rsdrill processes the tests
start, the test workers, the Kubernetes control plane, ...) and how many processes of it were
seen, beside the machine's busy and idle time. A process that lives less than an interval may
be missed (the busy line says how much was): what the suite's time is spent on, not an exact
account.

    python bench/suite_cpu.py [--interval 1] [-- COMMAND ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from rsdrill.procstat import fields_cpu_seconds, stat_fields

TICK = os.sysconf("SC_CLK_TCK")
# What in a command line names its kind, tried in order.
KINDS = (
    ("--router", "emulator router"),
    ("rsdrill_emulator.zygote", "emulator zygote"),
    ("rsdrill_emulator", "emulator member"),
    ("rsdrill.faultfs", "faultfs (Python layer)"),
    ("rsdrill-faultfs", "faultfs (compiled layer)"),
    ("tests.harness.cli_zygote", "rsdrill zygote (tests)"),
    ("rsdrill.cli", "rsdrill (started by a test)"),
    ("bin/rsdrill ", "rsdrill (started by a test)"),
    ("-u -c", "pytest worker"),
    ("pytest", "pytest"),
    ("kube-apiserver", "Kubernetes control plane"),
    ("kube-controller-manager", "Kubernetes control plane"),
    ("kube-scheduler", "Kubernetes control plane"),
    ("etcd", "Kubernetes control plane"),
    ("chaos", "Chaos Mesh"),
    ("moto", "moto (EC2)"),
    ("vcsim", "vcsim (vSphere)"),
    ("ferretdb", "FerretDB"),
    ("chromium", "Chromium"),
)


def kind_of(cmdline: str) -> str:
    for mark, kind in KINDS:
        if mark in cmdline:
            return kind
    words = cmdline.split()
    return f"other: {Path(words[0]).name}" if words else "other (no command line)"


def machine_times() -> tuple[float, float]:
    """Busy and idle CPU seconds of the whole machine since boot (proc(5), /proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, _iowait, irq, softirq = values[:7]
    return (user + nice + system + irq + softirq) / TICK, idle / TICK


class Sampler:
    """CPU seconds by kind, from each process's growth between two readings (a process first
    seen after the start counts whole)."""

    def __init__(self) -> None:
        self.by_kind: defaultdict[str, float] = defaultdict(float)
        self.processes: defaultdict[str, set[tuple[int, str]]] = defaultdict(set)
        self._seen: dict[int, tuple[str, float]] = {}
        self.sample(count=False)

    def sample(self, *, count: bool = True) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            fields = stat_fields(pid)
            if fields is None:
                continue
            try:
                cmdline = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
            started, cpu = fields[19], fields_cpu_seconds(fields)
            before = self._seen.get(pid)
            grown = cpu - before[1] if before and before[0] == started else cpu
            self._seen[pid] = (started, cpu)
            if count and grown > 0:
                kind = kind_of(cmdline)
                self.by_kind[kind] += grown
                self.processes[kind].add((pid, started))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("command", nargs="*", default=[sys.executable, "-m", "pytest"])
    args = parser.parse_args()
    busy0, idle0 = machine_times()
    started = time.monotonic()
    sampler = Sampler()
    child = subprocess.Popen(args.command)
    while child.poll() is None:
        time.sleep(args.interval)
        sampler.sample()
    busy1, idle1 = machine_times()
    sampled = sum(sampler.by_kind.values())
    print(f"\n{' '.join(args.command)}: exit {child.returncode} after "
          f"{time.monotonic() - started:.0f} s; the machine busy {busy1 - busy0:.0f} s, "
          f"idle {idle1 - idle0:.0f} s; {sampled:.0f} s of it seen in a process")  # fmt: skip
    for kind, seconds in sorted(sampler.by_kind.items(), key=lambda kv: -kv[1]):
        if seconds >= 0.5:
            print(f"{seconds:9.1f} s  {100 * seconds / max(sampled, 1e-9):5.1f} %  {kind} "
                  f"({len(sampler.processes[kind])} processes)")  # fmt: skip
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
