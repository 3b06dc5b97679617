"""The catalog's vSphere host-failure experiments, end to end through `rsdrill run` against vcsim,
with the VMs bound to sandbox members (tests/harness/vsphere_binding.py): the shape of the vSAN
reference architecture's table — rs=1 down for HA's restart (detection, the VM's boot, the
member's start, each recorded), rs=3 for an election — and no password anywhere in what the
runs leave behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.vcsim import Vcsim
from harness.vsphere_reference import HarnessRun, run_catalog, run_shared_host

from rsdrill.faults.host_kill import HA_DETECT_S


def check_clean(run: HarnessRun, sim: Vcsim, out: Path) -> None:
    assert run.binding_errors == []
    assert run.exit_code == 0, run.output
    assert run.result["verdict"] == "pass"
    texts = [run.output, run.journal] + [p.read_text(errors="replace")
                                          for p in out.rglob("*") if p.is_file()]  # fmt: skip
    assert not [t for t in texts if sim.password in t]
    assert "vsphere.power-on" in run.journal  # the revert action was journaled first


@pytest.mark.slow
def test_rs1_host_failure_is_down_for_has_detection_the_vms_boot_and_the_members_start(
    sim: Vcsim, tmp_path: Path
) -> None:
    boot = 3.0  # the harness's guests boot this long before their member starts
    run = run_catalog("rs1", sim, tmp_path, boot_s=boot)
    check_clean(run, sim, tmp_path / "out")
    (fault,) = run.result["faults"]
    ha = fault["detail"]["ha"]
    # The model as the file had it: HA's documented detection; the VM boots by itself.
    assert ha["model"] == {"detect_s": HA_DETECT_S, "boot_s": None}
    # Detection: the power-on came `detect` after the power-off began.
    assert HA_DETECT_S - 0.5 <= ha["detect_s"] <= HA_DETECT_S + 1, ha
    # The VM's boot as seen from outside: the power-on task, the guest's boot and mongod up to
    # its socket (the binding's watch adds up to a few seconds on a loaded machine).
    assert boot <= ha["boot_s"] <= boot + 5, ha
    assert 0 <= ha["member_start_s"] < 5, ha
    assert ha["back_s"] == pytest.approx(ha["detect_s"] + ha["boot_s"] + ha["member_start_s"])
    # The harness's ground truth: the member answered again detection + boot after its kill
    # (its kill lags the power-off by the watch's round trip: up to 3 s seen under load).
    assert run.member_restart_s is not None
    assert HA_DETECT_S + boot - 3 <= run.member_restart_s <= ha["back_s"] + 1, run.member_restart_s
    # No failover in rs=1: writes are back once the member is (plus the client's rediscovery).
    metrics = run.result["metrics"]
    assert metrics["failover_s"] is None
    assert ha["back_s"] - 1 <= metrics["write_unavailable_s"] <= ha["back_s"] + 5, metrics
    assert metrics["lost_acknowledged_writes"] == 0


@pytest.mark.slow
def test_rs3_host_failure_is_an_election_sized_interruption(sim: Vcsim, tmp_path: Path) -> None:
    # The old primary's VM boots long enough to come back after any election (HA powers it
    # on after 15 s; an election after a veto can take 23 s).
    run = run_catalog("psa", sim, tmp_path, boot_s=15.0)
    check_clean(run, sim, tmp_path / "out")
    metrics = run.result["metrics"]
    # MongoDB's default electionTimeoutMillis (10 s): the secondary calls an election 10 s
    # after the last heartbeat it had (up to 2 s before the host failed), plus up to 15 %; once
    # more when the arbiter, still seeing the primary healthy, vetoed the first attempt.
    assert run.vetoed_elections in (0, 1)
    elections = 1 + run.vetoed_elections
    assert 6 <= metrics["failover_s"] <= elections * 11.5 + 1.2
    assert 6 <= metrics["write_unavailable_s"] <= elections * 11.5 + 2
    # Not waiting for HA: the old primary came back later, on another host, and recovered.
    ha = run.result["faults"][0]["detail"]["ha"]
    assert metrics["write_unavailable_s"] < ha["back_s"]
    assert run.member_restart_s is not None
    assert any(v is not None for v in metrics["recovery_s"].values())


@pytest.mark.slow
def test_a_host_failure_interrupts_only_the_set_whose_primary_was_on_it(
    sim: Vcsim, tmp_path: Path
) -> None:
    # The vSAN report's rs=3 row: one ESXi host fails, holding set A's primary and set B's
    # secondary (B's primary and arbiter elsewhere). Boot as in the test above.
    run = run_shared_host(sim, tmp_path, boot_s=15.0)
    check_clean(run.failed, sim, tmp_path / "out")
    other = run.other
    assert other.binding_errors == []
    # The host failure took B's secondary with it (every VM on the host is powered off), and
    # HA brought it back with A's old primary.
    kills = [e for e in other.events if e.what.startswith("SIGKILL")]
    assert [e.member for e in kills] == [other.secondary], other.events
    assert any(e.member == other.secondary and e.what == "answering" for e in other.events)
    # A was interrupted for an election; B, still holding its primary and a majority of
    # votes, took every w:1 write meanwhile: its longest gap is the probe's own cadence.
    assert run.failed.result["metrics"]["write_unavailable_s"] >= 6
    assert other.acknowledged_writes > 1000
    assert other.failed_writes == 0, other.failures
    assert other.write_unavailable_s is not None and other.write_unavailable_s < 1.0
