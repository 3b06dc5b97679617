"""`rsdrill sandbox ...` driven as a user drives it, against real member processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.sandbox.cluster import process_state
from rsdrill.sandbox.config import Settings
from rsdrill.sandbox.sharded import ShardedSandbox, up_sharded
from tests.harness.cli import Rsdrill, rsdrill_run

ELECTION_TIMEOUT = "1000"


def rsdrill(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real command line in its own process."""
    return rsdrill_run(
        [*args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def up(directory: Path, port_base: int, topology: str = "rs3") -> dict[str, Any]:
    result = rsdrill(
        "sandbox", "up", "--topology", topology, "--dir", str(directory),
        "--port-base", str(port_base), "--election-timeout", ELECTION_TIMEOUT,
        "--engine", "emulator", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def status(directory: Path) -> dict[str, str]:
    """Member name → state, from `sandbox status --json`."""
    return {m["name"]: m["state"] for m in status_members(directory)}


def status_members(directory: Path) -> list[dict[str, Any]]:
    result = rsdrill("sandbox", "status", "--dir", str(directory), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["members"]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def hosts(port_base: int, count: int) -> list[str]:
    return [f"127.0.0.1:{port_base + i}" for i in range(count)]


# -- input errors: one line, exit status 2, nothing started ----------------------------------


def test_help_is_fast_because_pymongo_is_imported_lazily() -> None:
    probe = "import sys, rsdrill.cli.app; print('pymongo' in sys.modules)"
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert imported.stdout.strip() == "False"
    result = rsdrill("--help")
    assert result.returncode == 0
    assert "sandbox" in result.stdout


def test_up_refuses_a_taken_port_and_starts_nothing(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    base = free_port_base(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        result = CliRunner().invoke(
            app,
            ["sandbox", "up", "--topology", "rs3", "--dir", str(sandbox_dir),
             "--port-base", str(base), "--engine", "emulator"],
        )  # fmt: skip
    assert result.exit_code == 2
    assert f"port {base + 1} is already in use" in result.output
    assert "Traceback" not in result.output
    assert not sandbox_dir.exists()


def test_up_rejects_an_unknown_topology(sandbox_dir: Path) -> None:
    result = CliRunner().invoke(
        app, ["sandbox", "up", "--topology", "rs5", "--dir", str(sandbox_dir)]
    )
    assert result.exit_code == 2
    assert "rs5" in result.output
    assert "Traceback" not in result.output
    assert not sandbox_dir.exists()


def test_the_demo_offers_only_topologies_with_a_primary_to_kill(sandbox_dir: Path) -> None:
    offered = CliRunner().invoke(app, ["sandbox", "demo", "--help"], terminal_width=200)
    assert "<rs1|rs3|psa>" in offered.output, offered.output
    refused = CliRunner().invoke(
        app, ["sandbox", "demo", "--topology", "standalone", "--dir", str(sandbox_dir)]
    )
    assert refused.exit_code == 2 and "standalone" in refused.output, refused.output
    assert not sandbox_dir.exists()


def test_up_rejects_ports_beyond_65535(sandbox_dir: Path) -> None:
    result = CliRunner().invoke(
        app, ["sandbox", "up", "--topology", "rs3", "--dir", str(sandbox_dir),
              "--port-base", "65534", "--engine", "emulator"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "port 65536 is out of range" in result.output
    assert not sandbox_dir.exists()


def test_engine_mongod_without_mongod_on_path_is_refused(
    sandbox_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(
        app, ["sandbox", "up", "--topology", "rs1", "--dir", str(sandbox_dir), "--engine", "mongod"]
    )
    assert result.exit_code == 2
    assert "no mongod executable on PATH" in result.output
    assert not sandbox_dir.exists()


@pytest.mark.parametrize(
    "command",
    [["status"], ["kill", "primary"], ["stop", "27017"], ["cont", "secondary"], ["start", "x"]],
)
def test_commands_on_a_missing_sandbox_are_refused(sandbox_dir: Path, command: list[str]) -> None:
    result = CliRunner().invoke(app, ["sandbox", *command, "--dir", str(sandbox_dir)])
    assert result.exit_code == 2
    assert f"no sandbox in {sandbox_dir}" in result.output
    assert "Traceback" not in result.output


def test_down_on_a_missing_sandbox_is_a_no_op(sandbox_dir: Path) -> None:
    result = CliRunner().invoke(app, ["sandbox", "down", "--dir", str(sandbox_dir)])
    assert result.exit_code == 0
    assert "no member process was running" in result.output


def test_a_member_process_counts_as_running_from_the_moment_it_is_spawned() -> None:
    # Popen returns before the kernel has set the child's new command line up (it reads empty).
    for _ in range(20):
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(30)", "--host", "127.0.0.1:28999"]
        )
        try:
            assert process_state(child.pid, 28999) is not None
            cmdline = Path(f"/proc/{child.pid}/cmdline")
            wait_for(lambda path=cmdline: path.read_bytes() != b"", 5, "its command line")
            assert process_state(child.pid, 28999) is not None
            assert process_state(child.pid, 28998) is None  # not the process serving that port
        finally:
            child.kill()
            child.wait()
        assert process_state(child.pid, 28999) is None


# -- real member processes (the emulator engine) -------------------------------------------


def test_rs3_up_status_kill_start_stop_cont_down(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    base = free_port_base(3)
    names = hosts(base, 3)
    started = up(sandbox_dir, base)
    assert started["uri"] == f"mongodb://{','.join(names)}/?replicaSet=rs0"
    assert started["engine"] == "emulator"
    assert [m["name"] for m in started["members"]] == names

    members = status_members(sandbox_dir)
    assert sorted(m["state"] for m in members) == ["PRIMARY", "SECONDARY", "SECONDARY"]
    pids = {m["name"]: m["pid"] for m in members}
    assert all(isinstance(pid, int) and alive(pid) for pid in pids.values())
    assert members[0]["state"] == "PRIMARY"  # `up` steps the first member up
    # `top` and `ps -o comm` tell the members from other Python processes.
    assert {Path(f"/proc/{pid}/comm").read_text().strip() for pid in pids.values()} == {
        "rsdrill-member"
    }

    killed = rsdrill("sandbox", "kill", "primary", "--dir", str(sandbox_dir))
    assert killed.returncode == 0, killed.stderr
    assert names[0] in killed.stdout
    assert not alive(pids[names[0]])
    after_kill = status_members(sandbox_dir)
    assert after_kill[0] == {"name": names[0], "pid": None, "state": "DOWN"}
    assert all(alive(m["pid"]) for m in after_kill[1:])
    wait_for(lambda: "PRIMARY" in status(sandbox_dir).values(), 10, "a new primary")

    restarted = rsdrill("sandbox", "start", str(base), "--dir", str(sandbox_dir))
    assert restarted.returncode == 0, restarted.stderr
    wait_for(lambda: status(sandbox_dir)[names[0]] == "SECONDARY", 20, f"{names[0]} SECONDARY")
    new_pid = status_members(sandbox_dir)[0]["pid"]
    assert new_pid != pids[names[0]] and alive(new_pid)

    stopped = rsdrill("sandbox", "stop", names[0], "--dir", str(sandbox_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert status(sandbox_dir)[names[0]] == "STOPPED"
    resumed = rsdrill("sandbox", "cont", names[0], "--dir", str(sandbox_dir))
    assert resumed.returncode == 0, resumed.stderr
    # Its election timer ran out while it was frozen: it may call (and win) an election at once.
    wait_for(
        lambda: sorted(status(sandbox_dir).values()) == ["PRIMARY", "SECONDARY", "SECONDARY"],
        20,
        "one PRIMARY and two SECONDARY after SIGCONT",
    )

    all_pids = [m["pid"] for m in status_members(sandbox_dir)]
    downed = rsdrill("sandbox", "down", "--dir", str(sandbox_dir))
    assert downed.returncode == 0, downed.stderr
    assert not any(alive(pid) for pid in all_pids)
    assert {m["state"] for m in status_members(sandbox_dir)} == {"DOWN"}


def test_cont_refuses_a_member_that_is_not_stopped(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    """`cont secondary` named a running secondary (a frozen member has no role): it was sent
    SIGCONT, `resumed` was printed, and the frozen member stayed frozen."""
    base = free_port_base(3)
    up(sandbox_dir, base)
    frozen = f"127.0.0.1:{base + 2}"
    assert rsdrill("sandbox", "stop", frozen, "--dir", str(sandbox_dir)).returncode == 0

    by_role = rsdrill("sandbox", "cont", "secondary", "--dir", str(sandbox_dir))
    assert by_role.returncode == 2, by_role.stdout
    assert f"127.0.0.1:{base + 1} is not stopped (SECONDARY)" in by_role.stderr
    assert f"stopped: {frozen}" in by_role.stderr
    assert by_role.stdout == "" and "Traceback" not in by_role.stderr
    assert status(sandbox_dir)[frozen] == "STOPPED"

    resumed = rsdrill("sandbox", "cont", str(base + 2), "--dir", str(sandbox_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed {frozen}" in resumed.stdout
    assert status(sandbox_dir)[frozen] != "STOPPED"


def test_a_sharded_sandboxs_members_are_named_by_address_from_its_directory(
    free_port_base: Callable[[int], int], tmp_path: Path
) -> None:
    """kill/stop/cont/start on a sharded sandbox's directory said "no sandbox in DIR: start one
    with `rsdrill sandbox up`": the members are in its sets' directories."""
    base = free_port_base(3 + 3 + 1)
    directory = tmp_path / "sharded"
    cluster = up_sharded(directory, port_base=base, shards=1, routers=1, balancer=False,
                         settings=Settings(election_timeout_ms=1000))  # fmt: skip
    try:
        member = f"127.0.0.1:{base + 4}"  # shard0's second member
        killed = rsdrill("sandbox", "kill", str(base + 4), "--dir", str(directory))
        assert killed.returncode == 0, killed.stderr
        assert killed.stdout.startswith(f"killed {member} ")
        started = rsdrill("sandbox", "start", member, "--dir", str(directory))
        assert started.returncode == 0, started.stderr

        by_role = rsdrill("sandbox", "kill", "primary", "--dir", str(directory))
        assert by_role.returncode == 2 and "no sandbox in" not in by_role.stderr
        assert "every set of a sharded sandbox has its primary" in by_role.stderr
        router = rsdrill("sandbox", "stop", str(base + 6), "--dir", str(directory))
        assert router.returncode == 2
        assert f"'{base + 6}' is no member of the sharded sandbox's replica sets" in router.stderr
    finally:
        cluster.down(grace_s=2.0)
        assert not any(s.running() for s in ShardedSandbox(directory).sets.values())


def test_down_leaves_no_process_even_when_members_are_stopped(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    base = free_port_base(3)
    pids = [m["pid"] for m in up(sandbox_dir, base)["members"]]
    for port in (base, base + 2):
        assert rsdrill("sandbox", "stop", str(port), "--dir", str(sandbox_dir)).returncode == 0
    downed = rsdrill("sandbox", "down", "--dir", str(sandbox_dir))
    assert downed.returncode == 0, downed.stderr
    assert "none left running" in downed.stdout
    assert not any(alive(pid) for pid in pids)
    assert not list(sandbox_dir.glob("members/*/pid"))

    again = up(sandbox_dir, base)  # a stopped sandbox is replaced by a fresh one
    assert sorted(m["state"] for m in again["members"]) == ["PRIMARY", "SECONDARY", "SECONDARY"]
    assert not {m["pid"] for m in again["members"]} & set(pids)


def test_up_refuses_when_a_sandbox_already_runs(
    free_port_base: Callable[[int], int], sandbox_dir: Path, tmp_path: Path
) -> None:
    base = free_port_base(3)
    pids = sorted(m["pid"] for m in up(sandbox_dir, base)["members"])

    again = rsdrill(
        "sandbox", "up", "--topology", "rs3", "--dir", str(sandbox_dir),
        "--port-base", str(base + 10),
    )  # fmt: skip
    assert again.returncode == 2
    assert "already running" in again.stderr
    assert "Traceback" not in again.stderr
    assert sorted(m["pid"] for m in status_members(sandbox_dir)) == pids
    assert not (sandbox_dir / "members" / str(base + 10)).exists()

    elsewhere = tmp_path / "other"
    same_ports = rsdrill(
        "sandbox", "up", "--topology", "rs3", "--dir", str(elsewhere), "--port-base", str(base)
    )
    assert same_ports.returncode == 2
    assert f"port {base} is already in use" in same_ports.stderr
    assert not elsewhere.exists()
    assert all(alive(pid) for pid in pids)


@pytest.mark.parametrize(
    ("topology", "states"),
    [("rs1", ["PRIMARY"]), ("psa", ["PRIMARY", "SECONDARY", "ARBITER"])],
)
def test_up_builds_each_topology(
    free_port_base: Callable[[int], int], sandbox_dir: Path, topology: str, states: list[str]
) -> None:
    base = free_port_base(len(states))
    started = up(sandbox_dir, base, topology)
    assert [m["state"] for m in started["members"]] == states
    assert started["uri"] == f"mongodb://{','.join(hosts(base, len(states)))}/?replicaSet=rs0"


def test_up_without_a_topology_starts_rs3(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    """As the README's `sandbox up --tls` writes it (it once said: Missing option)."""
    base = free_port_base(3)
    done = rsdrill("sandbox", "up", "--dir", str(sandbox_dir), "--port-base", str(base), "--json")
    try:
        assert done.returncode == 0, done.stderr
        started = json.loads(done.stdout)
        assert started["topology"] == "rs3" and len(started["members"]) == 3, started
    finally:
        rsdrill("sandbox", "down", "--dir", str(sandbox_dir))


def test_start_wipe_resyncs_the_member_from_the_set(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    base = free_port_base(3)
    started = up(sandbox_dir, base)
    with MongoClient(started["uri"], w="majority", serverSelectionTimeoutMS=5000) as client:
        client.drill.docs.insert_many([{"n": n} for n in range(100)])
    secondary = f"127.0.0.1:{base + 2}"
    assert rsdrill("sandbox", "kill", secondary, "--dir", str(sandbox_dir)).returncode == 0

    wiped = rsdrill("sandbox", "start", secondary, "--wipe", "--dir", str(sandbox_dir))
    assert wiped.returncode == 0, wiped.stderr
    assert "empty data directory" in wiped.stdout
    wait_for(lambda: status(sandbox_dir)[secondary] == "SECONDARY", 30, "SECONDARY after resync")
    with MongoClient(secondary, directConnection=True, serverSelectionTimeoutMS=5000) as direct:
        assert direct.drill.docs.count_documents({}) == 100


def test_member_refs_that_match_nothing_are_refused(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    base = free_port_base(1)
    up(sandbox_dir, base, "rs1")
    for ref, message in [
        ("127.0.0.1:1", "is not a member of this sandbox"),
        ("secondary", "no member is SECONDARY right now"),
    ]:
        result = rsdrill("sandbox", "kill", ref, "--dir", str(sandbox_dir))
        assert result.returncode == 2
        assert message in result.stderr
    running = rsdrill("sandbox", "start", str(base), "--dir", str(sandbox_dir))
    assert running.returncode == 2
    assert "already running" in running.stderr
    assert status(sandbox_dir) == {f"127.0.0.1:{base}": "PRIMARY"}


def test_demo_fails_over_reports_and_tears_down(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    base = free_port_base(3)
    result = rsdrill(
        "sandbox", "demo", "--election-timeout", ELECTION_TIMEOUT, "--dir", str(sandbox_dir),
        "--port-base", str(base), "--engine", "emulator",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"SIGKILL primary 127.0.0.1:{base}" in out
    assert "w:majority writes acknowledged again" in out
    assert f"127.0.0.1:{base} is SECONDARY again" in out
    gap = float(out.split("writes unavailable for ")[1].split(" s")[0])
    assert 0.3 < gap < 10
    assert "sandbox torn down: 3 member processes stopped, none left running" in out
    assert not list(sandbox_dir.glob("members/*/pid"))


def test_demo_tears_down_when_terminated(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    base = free_port_base(3)
    demo = Rsdrill(
        ["sandbox", "demo", "--dir", str(sandbox_dir),
         "--port-base", str(base), "--engine", "emulator"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert demo.stdout is not None
    seen = ""
    while "SIGKILL primary" not in seen:  # default election timeout: the failover takes ~10 s
        line = demo.stdout.readline()
        assert line, f"demo ended early: {seen}"
        seen += line
    pids = [int(p.read_text()) for p in sandbox_dir.glob("members/*/pid")]
    assert len(pids) == 2
    demo.send_signal(signal.SIGTERM)
    rest, _ = demo.communicate(timeout=60)
    assert demo.returncode == 128 + signal.SIGTERM
    assert "sandbox torn down: 2 member processes stopped" in rest
    assert not any(alive(pid) for pid in pids)


@pytest.mark.skipif(shutil.which("mongod") is None, reason="no mongod binary on PATH")
def test_mongod_engine_runs_the_same_commands(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    base = free_port_base(3)
    result = rsdrill(
        "sandbox", "up", "--topology", "rs3", "--dir", str(sandbox_dir), "--port-base", str(base),
        "--election-timeout", ELECTION_TIMEOUT, "--engine", "mongod", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["engine"] == "mongod"
    assert sorted(status(sandbox_dir).values()) == ["PRIMARY", "SECONDARY", "SECONDARY"]
    pids = [m["pid"] for m in status_members(sandbox_dir)]
    assert rsdrill("sandbox", "down", "--dir", str(sandbox_dir)).returncode == 0
    assert not any(alive(pid) for pid in pids)
    assert os.path.isdir(sandbox_dir / "members" / str(base) / "data")


def test_up_records_every_setting_given(
    free_port_base: Callable[[int], int], sandbox_dir: Path
) -> None:
    result = rsdrill(
        "sandbox", "up", "--topology", "rs1", "--dir", str(sandbox_dir),
        "--port-base", str(free_port_base(1)), "--engine", "emulator",
        "--election-timeout", "3000", "--heartbeat-interval", "500", "--heartbeat-timeout", "4",
        "--catch-up-timeout", "250", "--oplog-size-mb", "8", "--initial-sync-mb-per-s", "1.5",
        "--cache-mb", "12",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    with MongoClient(
        json.loads(rsdrill("sandbox", "status", "--dir", str(sandbox_dir), "--json").stdout)[
            "members"
        ][0]["name"],
        directConnection=True,
        serverSelectionTimeoutMS=5000,
    ) as client:
        settings = client.admin.command("replSetGetConfig")["config"]["settings"]
    assert settings["electionTimeoutMillis"] == 3000
    assert settings["heartbeatIntervalMillis"] == 500
    assert settings["heartbeatTimeoutSecs"] == 4
    assert settings["catchUpTimeoutMillis"] == 250
    recorded = json.loads((sandbox_dir / "replset.json").read_text())
    assert recorded["oplog_size_bytes"] == 8 * 1024 * 1024
    assert recorded["initial_sync_bytes_per_s"] == int(1.5 * 1024 * 1024)
    assert recorded["cache_bytes"] == 12 * 1024 * 1024


def test_the_members_import_nothing_from_the_directory_rsdrill_runs_in(
    free_port_base: Callable[[int], int], sandbox_dir: Path, tmp_path: Path
) -> None:
    """A module there named as one the members import is not theirs (without -P, `python -m`
    puts that directory first on their import path, and this uvloop.py ended them)."""
    here = tmp_path / "work"
    here.mkdir()
    (here / "uvloop.py").write_text(
        "raise SystemExit('uvloop.py of the directory rsdrill ran in')\n"
    )
    base = free_port_base(1)
    done = rsdrill_run(
        ["sandbox", "up", "--topology", "rs1",
         "--dir", str(sandbox_dir), "--port-base", str(base), "--engine", "emulator", "--json"],
        capture_output=True, text=True, timeout=120, cwd=here,
    )  # fmt: skip
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert [m["state"] for m in json.loads(done.stdout)["members"]] == ["PRIMARY"]
    finally:
        rsdrill("sandbox", "down", "--dir", str(sandbox_dir))
