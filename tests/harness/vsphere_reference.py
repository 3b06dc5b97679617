"""The catalog's vSphere host-failure experiments, run end to end on the harness: a sandbox
replica set whose members are bound to vcsim VMs (one per ESXi host, as in the vSAN reference
architecture), `rsdrill run` through the real CLI, and the results set beside the published
table. Used by tests/vsphere/test_vsphere_catalog.py and bench/vsphere_reference.py.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.vcsim import Vcsim, connect, create_vm, esxi_hosts, wait_task
from harness.vsphere_binding import Event, VmBinding
from rsdrill.platforms.sandbox.target import free_port_base
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology

ROOT = Path(__file__).resolve().parents[2]
CATALOG = {"rs1": ROOT / "experiments" / "vsphere-rs1-host-failure.yaml",
           "psa": ROOT / "experiments" / "vsphere-rs3-host-failure.yaml"}  # fmt: skip
RUN_TIMEOUT_S = 240

# The vSAN reference architecture's host power-off results (see the project brief).
PUBLISHED = {
    "rs1": ("rs=1", "about 120 s", "vSphere HA restarts the VM"),
    "psa": ("rs=3 (2 data + arbiter)", "under 10 s", "replica set elects a new primary"),
}


@dataclass
class HarnessRun:
    topology: str
    exit_code: int
    output: str
    result: dict[str, Any]
    journal: str
    events: list[Event]
    binding_errors: list[str]
    restart_after_s: float
    # Seconds from the member's kill to its process answering again (harness ground truth).
    member_restart_s: float | None
    # Election attempts lost to the arbiter's veto after the kill (sandbox ground truth): an
    # arbiter that still sees the primary healthy refuses its vote, and the candidate waits
    # for its election timeout once more.
    vetoed_elections: int


def run_catalog(topology: str, sim: Vcsim, work: Path, *,
                election_timeout_ms: int = 10_000) -> HarnessRun:  # fmt: skip
    """Start the set, bind its members to fresh VMs (member i on ESXi host i), run the catalog
    experiment (a copy mapping members to their VMs by name: the harness's members share one
    IP, so their guests could not tell them apart) and stop everything."""
    spec = build_topology(topology, port_base=free_port_base(3),
                          settings=Settings(election_timeout_ms=election_timeout_ms))  # fmt: skip
    sandbox_dir = work / "sandbox"
    sandbox = up(sandbox_dir, spec, EmulatorEngine())
    si = connect(sim)
    vms: list[Any] = []
    try:
        hosts = esxi_hosts(si)
        names = {f"mongo-{m.port}": m.host for m in spec.members}
        vms = [create_vm(si, name, hosts[i]) for i, name in enumerate(names)]
        experiment = yaml.safe_load(CATALOG[topology].read_text())
        experiment["target"]["vsphere"]["vms"] = {
            "by": "map", "map": {member: name for name, member in names.items()}}  # fmt: skip
        copy = work / CATALOG[topology].name
        copy.write_text(yaml.safe_dump(experiment, sort_keys=False))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RSDRILL_HOME": str(work / "home"),
               "RSDRILL_URI": sandbox.uri, "VSPHERE_HOST": sim.host,
               "VSPHERE_PORT": str(sim.port), "VSPHERE_USER": sim.user,
               "VSPHERE_INSECURE": "true", "RSDRILL_VSPHERE_PASSWORD": sim.password}  # fmt: skip
        bound = {vm._moId: names[vm.name] for vm in vms}
        with VmBinding(sim, sandbox, bound) as binding:
            done = subprocess.run(
                [sys.executable, "-m", "rsdrill.cli", "run", str(copy), "--out",
                 str(work / "out"), "--no-live", "--no-history", "--yes"],
                capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT, env=env,
            )  # fmt: skip
        journal = "".join(p.read_text() for p in (work / "home" / "journal").glob("*.jsonl"))
        fault = experiment["faults"][0]
        return HarnessRun(
            topology=topology,
            exit_code=done.returncode,
            output=done.stdout + done.stderr,
            result=json.loads((work / "out" / "result.json").read_text()),
            journal=journal,
            events=binding.events,
            binding_errors=binding.errors,
            restart_after_s=float(str(fault["restart"]["after"]).rstrip("s")),
            member_restart_s=_kill_to_answer(binding.events),
            vetoed_elections=_vetoed(sandbox_dir, binding.events),
        )
    finally:
        for vm in vms:
            if vm.runtime.powerState != "poweredOff":
                wait_task(vm.PowerOffVM_Task())
            wait_task(vm.Destroy_Task())
        from pyVim.connect import Disconnect

        Disconnect(si)
        Sandbox(sandbox_dir).down(grace_s=2.0)


def _kill_to_answer(events: list[Event]) -> float | None:
    kill = next((e for e in events if e.what.startswith("SIGKILL")), None)
    back = next((e for e in events if kill and e.member == kill.member and e.at > kill.at
                 and e.what == "answering"), None)  # fmt: skip
    return None if kill is None or back is None else back.at - kill.at


def _vetoed(sandbox_dir: Path, events: list[Event]) -> int:
    kill = next((e for e in events if e.what.startswith("SIGKILL")), None)
    if kill is None:
        return 0
    lost = 0
    for log in (sandbox_dir / "members").glob("*/events.jsonl"):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            lost += event["event"] == "dry_run_lost" and event["t_mono"] > kill.at
    return lost


def side_by_side(runs: list[HarnessRun]) -> str:
    """The published host power-off rows next to what rsdrill measured on the harness (each
    topology's runs: median, and the range when there are several)."""
    lines = ["| replica set | failure | published interruption | published recovery | "
             "rsdrill on the harness: write_unavailable_s | failover_s | how it came back |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for topology in dict.fromkeys(r.topology for r in runs):
        series = [r for r in runs if r.topology == topology]
        label, interruption, recovery = PUBLISHED[topology]
        gaps = _spread([r.result["metrics"]["write_unavailable_s"] for r in series])
        failovers = _spread([r.result["metrics"]["failover_s"] for r in series])
        vetoed = sum(r.vetoed_elections > 0 for r in series)
        how = (f"VM powered on after {series[0].restart_after_s:g} s (standing in for HA)"
               if failovers == "-" else "new primary elected"
               + (f"; {vetoed} of {len(series)} after a second election timeout (the arbiter "
                  "vetoed the first)" if vetoed else ""))  # fmt: skip
        lines.append(f"| {label} | host power-off | {interruption} | {recovery} | {gaps} | "
                     f"{failovers} | {how} |")  # fmt: skip
    return "\n".join(lines)


def _spread(values: list[float | None]) -> str:
    known = sorted(v for v in values if v is not None)
    if not known:
        return "-"
    median = statistics.median(known)
    if len(known) == 1:
        return f"{median:.2f} s"
    return f"{median:.2f} s ({known[0]:.2f}-{known[-1]:.2f}, {len(known)} runs)"
