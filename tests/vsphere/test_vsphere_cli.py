"""`rsdrill run` on platform vsphere through the real CLI: refused by vCenter (one clear line,
exit 4, no traceback, no password, nothing injected), and killed with a VM powered off (then
`rsdrill recover` powers it on from the journal alone)."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.vcsim import Vcsim, create_vm, esxi_hosts

from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology
from tests.harness.cli import Rsdrill, rsdrill_run

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = """name: vsphere-refused
target:
  platform: vsphere
  topology: rs1
  uri: {uri}
  vsphere:
    host: {host}
    port: {port}
    user: {user}
    insecure: true
    password_env: VC_PASSWORD
    vms: {{by: map, map: {{"{member}": {vm}}}}}
faults:
  - {{at: 1s, kind: host-kill, restart: {{after: {after}}}}}
guards: {{allow_quorum_loss: true}}
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("password", "says"),
    [
        ("wrong", "vsphere: InvalidLogin: login to 127.0.0.1:{port} as rsdrill: user rsdrill, "
                  "password from $VC_PASSWORD (wrong user or password)"),
        ("right", "vsphere: NotFound: member {member}: no VM named no-such-vm on "
                  "127.0.0.1:{port}"),
    ],
)  # fmt: skip
def test_refusals_are_one_clear_line_and_nothing_is_injected(
    sim: Vcsim, sandbox_dir: Path, free_port_base: Callable[[int], int], tmp_path: Path,
    password: str, says: str,
) -> None:  # fmt: skip
    sandbox = up(sandbox_dir, build_topology("rs1", port_base=free_port_base(1)),
                 EmulatorEngine())  # fmt: skip
    member = sandbox.spec.members[0].host
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT.format(uri=sandbox.uri, host=sim.host, port=sim.port,
                                            user=sim.user, member=member, vm="no-such-vm",
                                            after="1s"))  # fmt: skip
    secret = sim.password if password == "right" else sim.password[::-1]
    done = rsdrill_run(
        ["run", str(experiment), "--out",
         str(tmp_path / "out"), "--no-live", "--no-history", "--yes"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "RSDRILL_HOME": str(tmp_path / "home"),
             "VC_PASSWORD": secret},
    )  # fmt: skip
    output = done.stdout + done.stderr
    # `rsdrill run` checks the platform first: refused before anything is built (exit 2).
    assert done.returncode == 2, output
    assert says.format(port=sim.port, member=member) in output
    assert "✘ platform vsphere: " in output and "Traceback" not in output
    assert not (tmp_path / "out").exists()
    journal = "".join(p.read_text() for p in (tmp_path / "home" / "journal").glob("*.jsonl"))
    assert "intent" not in journal  # nothing was about to be injected
    for text in (output, journal):
        assert secret not in text


@pytest.mark.slow
def test_recover_powers_on_the_vm_of_a_run_killed_during_its_fault(
    sim: Vcsim, si: Any, sandbox_dir: Path, free_port_base: Callable[[int], int], tmp_path: Path,
) -> None:  # fmt: skip
    sandbox = up(sandbox_dir, build_topology("rs1", port_base=free_port_base(1)),
                 EmulatorEngine())  # fmt: skip
    member = sandbox.spec.members[0].host
    vm = create_vm(si, f"crash-{secrets.token_hex(3)}", esxi_hosts(si)[1])
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT.format(uri=sandbox.uri, host=sim.host, port=sim.port,
                                            user=sim.user, member=member, vm=vm.name,
                                            after="5m"))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RSDRILL_HOME": str(tmp_path / "home"),
           "VC_PASSWORD": sim.password}  # fmt: skip
    run = Rsdrill(
        ["run", str(experiment), "--out",
         str(tmp_path / "out"), "--no-live", "--no-history", "--yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while vm.runtime.powerState != "poweredOff":
            assert run.poll() is None and time.monotonic() < deadline, "the fault never landed"
            time.sleep(0.1)
    finally:
        run.kill()  # SIGKILL: no rollback of its own
        run.wait()
    assert vm.runtime.powerState == "poweredOff"
    done = rsdrill_run(["recover"], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{vm.name} powered on" in done.stdout
    assert vm.runtime.powerState == "poweredOn"
    again = rsdrill_run(["recover"], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert "nothing to recover" in again.stdout
    journal = "".join(p.read_text() for p in (tmp_path / "home" / "journal").glob("*.jsonl"))
    for text in (done.stdout, done.stderr, journal):
        assert sim.password not in text


@pytest.mark.slow
def test_a_host_failure_that_would_take_a_majority_down_is_refused(
    sim: Vcsim, si: Any, sandbox_dir: Path, free_port_base: Callable[[int], int], tmp_path: Path,
) -> None:  # fmt: skip
    """The quorum guard counts one member per fault: two of three members on one ESXi host
    would both go down with it."""
    sandbox = up(sandbox_dir, build_topology("rs3", port_base=free_port_base(3)),
                 EmulatorEngine())  # fmt: skip
    hosts = esxi_hosts(si)
    members = [m.host for m in sandbox.spec.members]
    vms = [create_vm(si, f"shared-{secrets.token_hex(3)}", hosts[i]) for i in (2, 2, 3)]
    mapping = ", ".join(f'"{m}": {vm.name}' for m, vm in zip(members, vms, strict=True))
    experiment = tmp_path / "exp.yaml"
    text = EXPERIMENT.format(uri=sandbox.uri, host=sim.host, port=sim.port, user=sim.user,
                             member=members[0], vm=vms[0].name, after="5s")  # fmt: skip
    text = text.replace(f'{{"{members[0]}": {vms[0].name}}}', f"{{{mapping}}}")
    text = text.replace("topology: rs1", "topology: rs3").replace(
        "kind: host-kill,", "kind: host-kill, scope: host,").replace(
        "guards: {allow_quorum_loss: true}\n", "")  # fmt: skip
    experiment.write_text(text)
    done = rsdrill_run(
        ["run", str(experiment), "--out",
         str(tmp_path / "out"), "--no-live", "--no-history", "--yes"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "RSDRILL_HOME": str(tmp_path / "home"),
             "VC_PASSWORD": sim.password},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert (f"quorum guard: members {', '.join(sorted(members[:2]))} run on one ESXi host "
            f"({hosts[2].name}): a host failure (scope: host) takes 2 of the 3 members down "
            "together, a majority") in output  # fmt: skip
    assert [vm.runtime.powerState for vm in vms] == ["poweredOn"] * 3
