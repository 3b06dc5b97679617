"""The catalog's vSphere host-failure experiments, run end to end on the harness: a sandbox
replica set whose members are bound to vcsim VMs (one per ESXi host, as in the vSAN reference
architecture) that boot for `boot_s` when powered on, and `rsdrill run` through the real CLI.
`run_shared_host` adds a second set whose secondary shares the failed host, watched by
rsdrill's own write probe. Used by tests/vsphere/test_vsphere_catalog.py and bench/seeds.py.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.vcsim import Vcsim, create_vm, esxi_hosts, find_vm, session_of, wait_task
from harness.vsphere_binding import Event, VmBinding
from rsdrill.analysis.availability import unavailable_s
from rsdrill.history import History, RunClock
from rsdrill.platforms.sandbox.hosts import free_port_base
from rsdrill.probes.availability import WriteLoop
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology
from rsdrill.sandbox.groundtruth import all_events
from tests.harness.cli import rsdrill_run

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


@dataclass
class OtherSet:
    """A second PSA set on the same ESXi hosts, its secondary's VM on the failed primary's
    host, as rsdrill's write probe (w:1, journaled, every 20 ms) saw it during the run."""

    write_unavailable_s: float | None
    failed_writes: int
    acknowledged_writes: int
    failures: list[tuple[float, float, str, str]]  # (t_start, t_end, outcome, error) of each
    secondary: str  # its member whose VM shared the host
    events: list[Event]  # its binding's: what its members' VMs went through
    binding_errors: list[str]


@dataclass
class SharedHostRun:
    failed: HarnessRun  # the set whose primary was on the failed host
    other: OtherSet


def run_catalog(topology: str, sim: Vcsim, work: Path, *, election_timeout_ms: int = 10_000,
                heartbeat_timeout_s: int = 10, boot_s: float = 0.0) -> HarnessRun:  # fmt: skip
    """Start the set, bind its members to fresh VMs (member i on ESXi host i; a VM powered on
    boots for `boot_s` before its member starts), run the catalog experiment (a copy mapping
    members to their VMs by name: the harness's members share one IP, so their guests could
    not tell them apart) and stop everything."""
    settings = Settings(election_timeout_ms=election_timeout_ms,
                        heartbeat_timeout_s=heartbeat_timeout_s)  # fmt: skip
    with ExitStack() as stack:
        si = stack.enter_context(session_of(sim))
        sandbox = stack.enter_context(_replica_set(topology, work / "sandbox", settings))
        hosts = esxi_hosts(si)
        names = stack.enter_context(_vms(si, sandbox, hosts[: len(sandbox.spec.members)]))
        run = _run(topology, sim, si, work, sandbox, names, boot_s)
    return run


def run_shared_host(sim: Vcsim, work: Path, *, boot_s: float = 0.0) -> SharedHostRun:
    """The vSAN report's rs=3 host failure with the other shard beside it: set A (PSA, member
    i on ESXi host i) runs the catalog experiment, which fails its primary's host; set B (PSA)
    has its secondary on that host, its primary on the fourth host and its arbiter on one of
    A's secondaries' hosts, and rsdrill's write probe writes to it from before the run until
    after. Every VM is bound to its member, so the host failure kills B's secondary too."""
    settings = Settings()
    with ExitStack() as stack:
        si = stack.enter_context(session_of(sim))
        a = stack.enter_context(_replica_set("psa", work / "sandbox", settings))
        b = stack.enter_context(_replica_set("psa", work / "other", settings, set_name="rs1"))
        hosts = esxi_hosts(si)
        primary = _primary_index(a)
        b_primary = _primary_index(b)
        b_secondary = next(i for i, m in enumerate(b.spec.members)
                           if i != b_primary and not m.arbiter_only)  # fmt: skip
        spare = next(i for i in range(len(a.spec.members)) if i != primary)
        placement = {b_primary: hosts[len(a.spec.members)], b_secondary: hosts[primary],
                     3 - b_primary - b_secondary: hosts[spare]}  # fmt: skip
        names_a = stack.enter_context(_vms(si, a, hosts[: len(a.spec.members)]))
        names_b = stack.enter_context(_vms(si, b, [placement[i] for i in range(3)]))
        other = stack.enter_context(VmBinding(sim, b, _bound(si, names_b), boot_s=boot_s))
        history, clock = History(), RunClock.start()
        probe = WriteLoop("write", history, clock, uri=b.uri, collection="other_set",
                          interval_s=0.02, timeout_s=0.25, w=1, journal=True,
                          retries=False)  # fmt: skip
        probe.start()
        try:
            failed = _run("psa", sim, si, work, a, names_a, boot_s)
        finally:
            probe.stop()
            probe.join(5)
            probe.close()
        writes = history.ops("write")
        run = SharedHostRun(failed, OtherSet(
            write_unavailable_s=unavailable_s(writes, "write"),
            failed_writes=sum(not op.ok for op in writes),
            acknowledged_writes=sum(op.ok for op in writes),
            failures=[(round(op.t_start, 3), round(op.t_end, 3), op.outcome,
                       str(op.detail.get("error", ""))) for op in writes if not op.ok],
            secondary=b.spec.members[b_secondary].host,
            events=other.events,
            binding_errors=other.errors,
        ))  # fmt: skip
    return run


def _run(topology: str, sim: Vcsim, si: Any, work: Path, sandbox: Sandbox,
         names: dict[str, str], boot_s: float) -> HarnessRun:  # fmt: skip
    """`rsdrill run` of the catalog experiment against `sandbox`, its VMs (`names`: VM name ->
    member) bound for the run's length."""
    experiment = yaml.safe_load(CATALOG[topology].read_text())
    experiment["target"]["vsphere"]["vms"] = {
        "by": "map", "map": {member: name for name, member in names.items()}}  # fmt: skip
    copy = work / CATALOG[topology].name
    copy.write_text(yaml.safe_dump(experiment, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RSDRILL_HOME": str(work / "home"),
           "RSDRILL_URI": sandbox.uri, "VSPHERE_HOST": sim.host,
           "VSPHERE_PORT": str(sim.port), "VSPHERE_USER": sim.user,
           "VSPHERE_INSECURE": "true", "RSDRILL_VSPHERE_PASSWORD": sim.password}  # fmt: skip
    with VmBinding(sim, sandbox, _bound(si, names), boot_s=boot_s) as binding:
        done = rsdrill_run(
            ["run", str(copy), "--out",
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
        vetoed_elections=vetoed_elections(sandbox.directory, _kill_at(binding.events)),
    )


@contextmanager
def _replica_set(topology: str, directory: Path, settings: Settings,
                 set_name: str = "rs0") -> Iterator[Sandbox]:  # fmt: skip
    spec = build_topology(topology, port_base=free_port_base(3), settings=settings,
                          set_name=set_name)  # fmt: skip
    sandbox = up(directory, spec, EmulatorEngine())
    try:
        yield sandbox
    finally:
        Sandbox(directory).down(grace_s=2.0)


@contextmanager
def _vms(si: Any, sandbox: Sandbox, hosts: list[Any]) -> Iterator[dict[str, str]]:
    """A fresh VM per member (member i on `hosts[i]`), named after its port: VM name ->
    member. They are powered off and destroyed on the way out."""
    names = {f"mongo-{m.port}": m.host for m in sandbox.spec.members}
    vms: list[Any] = []
    try:
        for name, host in zip(names, hosts, strict=True):
            vms.append(create_vm(si, name, host))
        yield names
    finally:
        for vm in vms:
            if vm.runtime.powerState != "poweredOff":
                wait_task(vm.PowerOffVM_Task())
            wait_task(vm.Destroy_Task())


def _bound(si: Any, names: dict[str, str]) -> dict[str, str]:
    """VM managed-object id -> member, for `VmBinding`."""
    return {find_vm(si, name)._moId: member for name, member in names.items()}


def _primary_index(sandbox: Sandbox) -> int:
    states = [s.state for s in sandbox.status()]
    return states.index("PRIMARY")


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
