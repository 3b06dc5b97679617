"""Storage and network fault kinds and platform sections in experiment files: what each kind
accepts, what it refuses (with the field named), how the plan and the guards read them."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from rsdrill.engine.actions import carry_out, describe
from rsdrill.engine.guards import max_concurrent_down
from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.plan import render_plan
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.base import ProcessHosts, TargetError
from rsdrill.platforms.machine.disk_fill import FILLER, DiskFill

HEAD = "name: x\ntarget:\n  platform: sandbox\nfaults:\n"


def load(faults: str, head: str = HEAD) -> Experiment:
    return load_experiment_text(head + faults, "exp.yaml", {})


def error_of(faults: str, head: str = HEAD) -> ExperimentError:
    with pytest.raises(ExperimentError) as caught:
        load(faults, head)
    return caught.value


def test_every_new_kind_loads_and_plans() -> None:
    exp = load(
        "  - {at: 1s, kind: disk-fault, duration: 5s, errno: ENOSPC, operations: [fsync],"
        " probability: 0.5, path: 'journal/*'}\n"
        "  - {at: 1s, kind: iops-throttle, duration: 5s, write_iops: 100, read_mb_s: 2}\n"
        "  - {at: 1s, kind: volume-detach, duration: 5s, select: secondary}\n"
        "  - {at: 1s, kind: network-partition, duration: 5s, isolate_from: clients,"
        " direction: inbound}\n"
        "  - {at: 9s, kind: host-kill, duration: 5s, power_loss: true}\n"
    )
    plan = render_plan(exp)
    assert "ENOSPC on 50% of fsync of journal/*" in plan
    assert "write iops 100, reads 2 MiB/s" in plan
    assert "detach its data volume" in plan
    assert "cut it off from clients (inbound only)" in plan
    assert "SIGKILL, unsynced writes lost" in plan
    assert "heal the partition" in plan and "lift the throttle" in plan


@pytest.mark.parametrize(
    ("fault", "field", "problem"),
    [
        ("{at: 1s, kind: disk-fault}", "faults[0].duration", "disk-fault needs a `duration`"),
        ("{at: 1s, kind: iops-throttle, duration: 5s}", "faults[0].kind", "needs a limit"),
        (
            "{at: 1s, kind: disk-fault, duration: 5s, errno: EWHAT}",
            "faults[0].errno",
            "'EWHAT' is not an errno name",
        ),
        (
            "{at: 1s, kind: disk-fault, duration: 5s, errno: none}",
            "faults[0].errno",
            "the fault does nothing",
        ),
        (
            "{at: 1s, kind: host-freeze, duration: 5s, write_iops: 5}",
            "faults[0].write_iops",
            "`write_iops` applies to iops-throttle, not host-freeze",
        ),
        (
            "{at: 1s, kind: stepdown, power_loss: true}",
            "faults[0].power_loss",
            "applies to host-kill",
        ),
        (
            "{at: 1s, kind: host-kill, duration: 5s, engine: fis}",
            "faults[0].engine",
            "platform sandbox has no fault engines",
        ),
        (
            "{at: 1s, kind: host-kill, duration: 5s, scope: node}",
            "faults[0].scope",
            "scope node needs a platform with nodes or hosts",
        ),
        (
            "{at: 1s, kind: disk-fault, duration: 5s, probability: 0}",
            "faults[0].probability",
            "must be more than 0.0, not 0",
        ),
        (
            "{at: 1s, kind: host-kill, restart: {model: ha, after: 20s}}",
            "faults[0].restart.after",
            "model ha restarts the host `detect` after the failure",
        ),
        (
            "{at: 1s, kind: host-kill, duration: 20s, restart: {model: ha}}",
            "faults[0].duration",
            "drop `duration`",
        ),
        (
            "{at: 1s, kind: host-kill, duration: 20s, restart: {boot: 30s}}",
            "faults[0].restart.boot",
            "boot applies to restart model ha",
        ),
        (
            "{at: 1s, kind: host-kill, restart: {model: ha, detect: soon}}",
            "faults[0].restart.detect",
            "soon",
        ),
    ],
)
def test_kind_specific_mistakes_name_the_field(fault: str, field: str, problem: str) -> None:
    err = error_of(f"  - {fault}\n")
    assert err.field == field
    assert problem in err.problem


def test_remote_platform_needs_its_section_and_uri() -> None:
    faults = "faults:\n  - {at: 1s, kind: stepdown}\n"
    err = error_of("", "name: x\ntarget:\n  platform: ec2\n  uri: mongodb://h:1/\n" + faults)
    assert err.field == "target.ec2"


def test_quorum_guard_counts_only_faults_that_take_a_member_out() -> None:
    member = "select: {member: '127.0.0.1:2810%d'}"
    exp = load(
        f"  - {{at: 1s, kind: iops-throttle, duration: 9s, iops: 10, {member % 0}}}\n"
        f"  - {{at: 1s, kind: disk-fault, duration: 9s, operations: [read], {member % 1}}}\n"
        "  - {at: 1s, kind: network-partition, duration: 9s, isolate_from: clients}\n"
        f"  - {{at: 1s, kind: volume-detach, duration: 9s, {member % 2}}}\n"
        f"  - {{at: 2s, kind: network-partition, duration: 9s, {member % 1}}}\n",
        HEAD.replace("sandbox", "sandbox\n  port_base: 28100"),
    )
    down = [f.takes_member_down() for f in exp.faults]
    assert down == [False, False, False, True, True]
    assert max_concurrent_down(exp.faults).members == 2


def test_a_sandbox_member_is_named_only_by_an_address_it_can_have() -> None:
    kill = "  - {at: 1s, kind: host-kill, duration: 5s, select: {member: '127.0.0.1:%d'}}\n"
    err = error_of(kill % 1)
    assert err.field == "faults[0].select.member" and "port_base" in err.problem
    fixed = HEAD.replace("sandbox", "sandbox\n  topology: rs3\n  port_base: 28100")
    err = error_of(kill % 28103, fixed)
    assert "127.0.0.1:28103 is not a member" in err.problem and "127.0.0.1:28102" in err.problem
    assert load(kill % 28102, fixed).faults[0].select.member == "127.0.0.1:28102"


def test_platform_revert_actions_are_found_by_their_prefix() -> None:
    with pytest.raises(TargetError, match="cannot load the nosuch platform"):
        carry_out({"action": "nosuch.thing"})
    with pytest.raises(TargetError, match="unknown revert action"):
        carry_out({"action": "../etc.passwd"})


def test_a_revert_is_described_by_what_it_acts_on_not_how_it_connects() -> None:
    connect = {"app_name": "rsdrill", "credentials": {"user": "u", "password": True}}
    action = {"action": "fail-command-off", "host": "127.0.0.1:1", "connect": connect}
    assert describe(action) == "fail-command-off (host=127.0.0.1:1)"


def test_a_relative_sandbox_directory_not_found_here_stays_owed(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Journaled relative by an older rsdrill: from another directory it is not "gone".
    monkeypatch.chdir(tmp_path)
    start = {"action": "sandbox-start", "dir": "out/sandbox", "host": "127.0.0.1:1"}
    for action in ({"action": "sandbox-down", "dir": "out/sandbox"}, start):
        with pytest.raises(TargetError, match=r"not found from .*run `rsdrill recover` there"):
            carry_out(action)
    gone = {"action": "sandbox-down", "dir": str(tmp_path / "gone" / "sandbox")}
    assert carry_out(gone).endswith("nothing running")  # absolute and missing: gone indeed


def test_a_relative_mountpoint_or_filler_not_found_here_stays_owed(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not "no longer mounted, nothing to clear" nor "no filler left": the rule and the filler
    # may be in force where the run was started.
    monkeypatch.chdir(tmp_path)
    clear = {"action": "faultfs-clear", "host": "127.0.0.1:1", "mountpoint": "out/m1",
             "rule": "r"}  # fmt: skip
    fill = {"action": "disk-fill-free", "host": "127.0.0.1:1", "path": f"data/{FILLER}"}
    for action in (clear, fill):
        with pytest.raises(TargetError, match=r"not found from .*run `rsdrill recover` there"):
            carry_out(action)
    assert carry_out({**fill, "path": str(tmp_path / "gone")}).endswith("no filler left")


def test_a_filler_is_journaled_absolute(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fill = DiskFill(cast(ProcessHosts, None), "127.0.0.1:1", Path("data"), 90.0, {})
    action = fill.revert_action() or {}
    assert action["path"] == str(tmp_path / "data" / FILLER)


def test_a_local_members_relative_dbpath_is_the_runs_not_recovers(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsdrill.connection import ConnectOptions
    from rsdrill.experiment.target import LocalMember
    from rsdrill.platforms.machine.local_hosts import LocalHosts

    for where in ("run", "elsewhere"):
        (tmp_path / where / "data").mkdir(parents=True)
        (tmp_path / where / "data" / "f").write_text(where)
    monkeypatch.chdir(tmp_path / "run")
    member = LocalMember(host="127.0.0.1:1", start="true", dbpath="data")
    hosts = LocalHosts((member,), tmp_path / "logs", ConnectOptions())
    action = hosts.restart_action("127.0.0.1:1", wipe=True)
    assert action["cwd"] == str(tmp_path / "run")
    monkeypatch.chdir(tmp_path / "elsewhere")  # where `rsdrill recover` runs
    LocalHosts((member,), tmp_path / "logs", ConnectOptions(), cwd=Path(action["cwd"])).wipe(
        "127.0.0.1:1"
    )
    assert not (tmp_path / "run" / "data" / "f").exists()
    assert (tmp_path / "elsewhere" / "data" / "f").read_text() == "elsewhere"
    # Journaled without the run's directory (an older rsdrill): not restarted, not wiped.
    del action["cwd"]
    with pytest.raises(TargetError, match=r"relative to the directory the run was started in"):
        carry_out(action)
    assert (tmp_path / "elsewhere" / "data" / "f").exists()


@pytest.mark.parametrize("platform", ["kubernetes", "ec2", "vsphere"])
def test_data_loss_is_refused_on_remote_platforms(platform: str) -> None:
    head = f"name: x\ntarget:\n  platform: {platform}\n  uri: mongodb://h:1/\n  {platform}: {{}}\n"
    steps = "steps:\n  - {at: 3s, name: r, marks: restore, run: 'true'}\n"
    err = error_of("  - {at: 1s, kind: data-loss}\n" + steps, head + "faults:\n")
    # The platform's own section may be refused first; never a traceback, always a field.
    assert err.field in ("faults[0].kind", f"target.{platform}") or err.field.startswith(
        f"target.{platform}."
    )


def test_step_names_are_unique_and_data_loss_needs_a_restore() -> None:
    steps = (
        "steps:\n  - {at: 3s, name: r, marks: restore, run: 'true'}\n"
        "  - {at: 4s, name: r, run: 'true'}\n"
    )
    err = error_of("  - {at: 1s, kind: data-loss}\n" + steps)
    assert (err.field, err.problem) == ("steps[1].name", "another step is named 'r'")
    err = error_of("  - {at: 1s, kind: data-loss}\n")
    assert err.field == "faults[0].kind"
    assert "data-loss needs a step with `marks: restore`" in err.problem


def test_the_ha_model_restarts_the_host_once_the_failure_is_detected() -> None:
    """With `model: ha` the host is back `detect` after the failure (HA's documented 15 s by
    default) and boots for `boot` (60 s by default, an assumption) before the member starts."""
    exp = load("  - {at: 5s, kind: host-kill, restart: {model: ha}}\n"
               "  - {at: 5s, kind: host-kill, select: secondary, restart: {model: ha, "
               "detect: 30s, boot: 2m, volume: wipe}}\n")  # fmt: skip
    default, tuned = exp.faults
    assert default.restart and tuned.restart
    assert (default.restart.detect, default.restart.boot, default.revert_after) == (15, 60, 15)
    assert (tuned.restart.detect, tuned.restart.boot, tuned.revert_after) == (30, 120, 30)
    plan = render_plan(exp)
    assert "t+20.0s" in plan and "t+35.0s" in plan
    assert ("HA restarts it (detected after 15s): boot 60s, then the member starts on its "
            "kept data directory") in plan  # fmt: skip
    assert "boot 120s, then the member starts on an empty data directory" in plan


LOCAL = (
    "name: x\ntarget:\n  platform: local\n  uri: mongodb://127.0.0.1:1/\n  members:\n"
    "    - {host: '127.0.0.1:1', start: 'mongod --port 1', dbpath: /data/m1}\n"
    "    - {host: '127.0.0.1:2', start: 'mongod --port 2'}\nfaults:\n"
)


def test_local_disk_fill_needs_every_dbpath_and_local_clock_skew_refuses_drift() -> None:
    err = error_of("  - {at: 1s, kind: disk-fill, duration: 5s}\n", LOCAL)
    assert err.field == "target.members[1].dbpath"
    assert "disk-fill: every member needs its `dbpath` (a filesystem of its own)" in err.problem
    err = error_of("  - {at: 1s, kind: clock-skew, duration: 5s, clock_drift: 0.1}\n", LOCAL)
    assert err.field == "faults[0].clock_drift"
    assert "libfaketime's rate counts from the member's start" in err.problem
    # Without drift, a local clock-skew loads (libfaketime is checked before the run).
    assert load("  - {at: 1s, kind: clock-skew, duration: 5s, clock_offset: -30}\n", LOCAL)
