"""The catalog's vSphere host-failure experiments, run end to end on the harness: a sandbox
replica set whose members are bound to vcsim VMs (one per ESXi host, as in the vSAN reference
architecture) that boot for `boot_s` when powered on, and `rsdrill run` through the real CLI.
Used by tests/vsphere/test_vsphere_catalog.py and bench/seeds.py.
"""

from __future__ import annotations

import json
import math
import os
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
from rsdrill.sandbox.groundtruth import all_events

ROOT = Path(__file__).resolve().parents[2]
CATALOG = {"rs1": ROOT / "experiments" / "vsphere-rs1-host-failure.yaml",
           "psa": ROOT / "experiments" / "vsphere-rs3-host-failure.yaml"}  # fmt: skip
RUN_TIMEOUT_S = 420


@dataclass
class HarnessRun:
    topology: str
    exit_code: int
    output: str
    result: dict[str, Any]
    journal: str
    events: list[Event]
    binding_errors: list[str]
    # Seconds from the member's kill to its process answering again (harness ground truth).
    member_restart_s: float | None
    # Election attempts lost to the arbiter's veto after the kill (sandbox ground truth): an
    # arbiter that still sees the primary healthy refuses its vote, and the candidate waits
    # for its election timeout once more.
    vetoed_elections: int


def run_catalog(topology: str, sim: Vcsim, work: Path, *, election_timeout_ms: int = 10_000,
                heartbeat_timeout_s: int = 10, boot_s: float = 0.0) -> HarnessRun:  # fmt: skip
    """Start the set, bind its members to fresh VMs (member i on ESXi host i; a VM powered on
    boots for `boot_s` before its member starts), run the catalog experiment (a copy mapping
    members to their VMs by name: the harness's members share one IP, so their guests could
    not tell them apart) and stop everything."""
    settings = Settings(election_timeout_ms=election_timeout_ms,
                        heartbeat_timeout_s=heartbeat_timeout_s)  # fmt: skip
    spec = build_topology(topology, port_base=free_port_base(3), settings=settings)
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
        with VmBinding(sim, sandbox, bound, boot_s=boot_s) as binding:
            done = subprocess.run(
                [sys.executable, "-m", "rsdrill.cli", "run", str(copy), "--out",
                 str(work / "out"), "--no-live", "--no-history", "--yes"],
                capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT, env=env,
            )  # fmt: skip
        journal = "".join(p.read_text() for p in (work / "home" / "journal").glob("*.jsonl"))
        return HarnessRun(
            topology=topology,
            exit_code=done.returncode,
            output=done.stdout + done.stderr,
            result=json.loads((work / "out" / "result.json").read_text()),
            journal=journal,
            events=binding.events,
            binding_errors=binding.errors,
            member_restart_s=_kill_to_answer(binding.events),
            vetoed_elections=vetoed_elections(sandbox_dir, _kill_at(binding.events)),
        )
    finally:
        for vm in vms:
            if vm.runtime.powerState != "poweredOff":
                wait_task(vm.PowerOffVM_Task())
            wait_task(vm.Destroy_Task())
        from pyVim.connect import Disconnect

        Disconnect(si)
        Sandbox(sandbox_dir).down(grace_s=2.0)


def _kill_at(events: list[Event]) -> float:
    """When the binding killed the first member (math.inf if it killed none)."""
    return next((e.at for e in events if e.what.startswith("SIGKILL")), math.inf)


def _kill_to_answer(events: list[Event]) -> float | None:
    kill = next((e for e in events if e.what.startswith("SIGKILL")), None)
    back = next((e for e in events if kill and e.member == kill.member and e.at > kill.at
                 and e.what == "answering"), None)  # fmt: skip
    return None if kill is None or back is None else back.at - kill.at


def vetoed_elections(sandbox_dir: Path, after_mono: float) -> int:
    """Election attempts lost at their dry run after `after_mono` (a sandbox's ground truth):
    in a PSA set, the arbiter's veto while it still sees the old primary healthy."""
    return sum(e["event"] == "dry_run_lost" and e["t_mono"] > after_mono
               for e in all_events(sandbox_dir))  # fmt: skip
