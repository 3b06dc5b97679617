"""rsdrill against FerretDB, a MongoDB-compatible server nobody here wrote (tests/harness/
ferretdb.py): the catalog's rs=1 experiments on it as a `platform: local` standalone, through
the real CLI. What it checks is rsdrill's side — the server found and described as what it is,
the outage measured by its own events, faults reverted, the durability ledger counting what a
real storage stack (SQLite's) lost at a power loss — and FerretDB's answers are what they are."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.ferretdb import CLAIMED_VERSION, FerretDB, ferretdb, restart_cleanly
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from rsdrill.connection import ConnectOptions, answers_hello
from rsdrill.history import History
from tests.e2e.catalog import REPO, catalog, result_of, run_cli
from tests.harness.cli import Rsdrill, rsdrill_run
from tests.harness.processes import kill_after_line

pytest_plugins = ["tests.integration.faultfs_fixtures"]
pytestmark = pytest.mark.usefixtures("no_faultfs_mount_left")


def _on(server: FerretDB, name: str, **changes: Any) -> dict[str, Any]:
    """Catalog experiment NAME aimed at `server` (compressed in time: a fault at 3 s, 4 s)."""
    document = catalog(name, **server.target("rs1"))
    document.update(changes)
    return document


def test_check_finds_a_standalone_of_the_version_it_claims(tmp_path: Path) -> None:
    with ferretdb(tmp_path / "ferretdb") as server:
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump(_on(server, "rs1-host-kill")))
        done = rsdrill_run(["check", str(path)],
                           capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"standalone, version {CLAIMED_VERSION}" in done.stdout
        assert "rsdrill's emulator" not in done.stdout
        # A metric only a replica set has cannot hold on it: refused before anything runs.
        path.write_text(yaml.safe_dump(_on(server, "rs1-host-kill", slo={"failover_s": "<= 5"})))
        done = rsdrill_run(["check", str(path)],
                           capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        assert "failover_s" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_host_kill_is_down_for_the_restart_and_the_result_says_what_was_measured(
    tmp_path: Path,
) -> None:
    with ferretdb(tmp_path / "ferretdb") as server:
        first_pid = server.pid()
        code, output, out = run_cli(tmp_path, _on(server, "rs1-host-kill"), "--yes")
        assert code == 0, output
        result = result_of(out)
        # Found as what it is, and said so: not rsdrill's emulator, its claimed version, no
        # storage engine (FerretDB's serverStatus names none: null, not a guess).
        assert result["target"]["topology"] == "standalone"
        assert result["target"]["server"] == {
            "topology": "standalone", "set_name": None, "version": CLAIMED_VERSION,
            "handshake": "hello", "streaming_hello": False, "storage_engine": None,
            "emulator": False, "tls": False, "auth_mechanism": None,
        }  # fmt: skip
        assert f"measured on: MongoDB {CLAIMED_VERSION}, standalone" in output
        # Killed at the injection, restarted 4 s later by the member's own start command: the
        # server's gap (rsdrill's wire writer) is the restart delay plus FerretDB's start.
        [fault] = result["faults"]
        # Held 4 s from when the kill had landed (inside the injection, before its check).
        held = fault["reverted_at_s"] - fault["injected_at_s"]
        assert 4.0 <= held <= fault["verified_at_s"] - fault["injected_at_s"] + 4.2, fault
        metrics = result["metrics"]
        assert 4.0 <= metrics["raw_write_unavailable_s"] <= 6.0, metrics
        # The audit (on by default) has nothing to compare a standalone server with, and says so.
        audit = result["audit"]
        assert audit["consistent"] is None and "no other member" in audit["error"], audit
        assert metrics["divergent_members"] is None
        assert metrics["raw_write_unavailable_s"] <= metrics["write_unavailable_s"] <= 7.0
        assert {"failover_s", "replication_lag_max_s"} <= set(metrics["not_applicable"])
        assert metrics["lost_acknowledged_writes"] == 0 and metrics["acknowledged_writes"] > 50
        states = [s for _, s in metrics["member_states"][server.host]]
        assert states[0] == "STANDALONE" and "DOWN" in states and states[-1] == "STANDALONE"
        # Nothing left behind: a new FerretDB process serves again.
        assert server.pid() not in (None, first_pid)
        assert answers_hello(server.host, timeout_s=2.0, options=ConnectOptions())


# A password SASLprep maps to another (the soft hyphen is mapped to nothing): the login
# succeeds only if rsdrill's SCRAM applies SASLprep as FerretDB's does (NFKC alone keeps it).
PASSWORD = "pa\u00adss-word"


def _check(tmp_path: Path, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "check.yaml"
    path.write_text(yaml.safe_dump(document))
    return rsdrill_run(["check", str(path)],
                       capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip


@pytest.mark.slow
def test_tls_with_a_client_certificate_and_a_scram_login_from_another_tls_stack(
    tmp_path: Path,
) -> None:
    # Go's TLS and FerretDB's SCRAM-SHA-256, certificates made by the openssl CLI: every
    # socket rsdrill opens (pymongo's probes, its own wire pollers and guards) goes through
    # them, and so does the member's restart.
    with ferretdb(tmp_path / "ferretdb", tls=True, user=("ops", PASSWORD)) as server:
        assert server.tls is not None
        done = _check(tmp_path, _on(server, "rs1-host-kill"))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "TLS with a client certificate; login SCRAM as ops on admin" in done.stdout
        assert f"reach {server.host}: answers hello, TLS, logged in" in done.stdout
        # FerretDB has no roles: what the user may do is not listed, so not checked.
        assert "! privileges: logged in as ops@admin" in done.stdout
        # Refused, named, before anything runs: a certificate from another CA, a wrong password.
        for uri, cause in ((server.uri_as(server.user, server.tls.stranger), "certificate"),
                           (server.uri_as(("ops", "not-the-password")), "login")):  # fmt: skip
            document = _on(server, "rs1-host-kill")
            document["target"]["uri"] = uri
            done = _check(tmp_path, document)
            assert done.returncode == 2, done.stdout + done.stderr
            [line] = [line for line in done.stdout.splitlines() if line.startswith("✘")]
            assert server.host in line and "Traceback" not in done.stderr, line
            assert cause in line.lower() or "tls" in line.lower(), line
        code, output, out = run_cli(tmp_path, _on(server, "rs1-host-kill"), "--yes")
        assert code == 0, output
        result = result_of(out)
        assert result["target"]["server"]["tls"] is True
        assert result["target"]["server"]["auth_mechanism"] == "SCRAM-SHA-256"  # as negotiated
        assert 4.0 <= result["metrics"]["raw_write_unavailable_s"] <= 6.0, result["metrics"]
        assert result["metrics"]["lost_acknowledged_writes"] == 0
        encoded = server.uri.split("@")[0].split(":")[-1]
        leaks = [p for p in [*out.rglob("*"), *(tmp_path / "home").rglob("*")]
                 if p.is_file() and (PASSWORD in p.read_text(errors="replace")
                                     or encoded in p.read_text(errors="replace"))]  # fmt: skip
        assert not leaks and PASSWORD not in output and encoded not in output


@pytest.mark.slow
def test_a_replica_set_it_claims_without_replsetgetstatus_is_read_from_hello(
    tmp_path: Path,
) -> None:
    # With --repl-set-name, FerretDB's hello claims a one-member replica set (drivers see a
    # primary of rs0), while replSetGetStatus and replSetGetConfig are CommandNotFound.
    with ferretdb(tmp_path / "ferretdb", repl_set_name="rs0") as server:
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump(_on(server, "rs1-host-kill")))
        done = rsdrill_run(["check", str(path)],
                           capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "topology: replica set rs0" in done.stdout
        assert "! replica-set status:" in done.stdout and "read from hello" in done.stdout
        code, output, out = run_cli(tmp_path, _on(server, "rs1-host-kill"), "--yes")
        assert code == 0, output
        assert "counting every member the primary's hello lists" in output
        result = result_of(out)
        assert result["target"]["server"]["topology"] == "replica set"
        assert result["target"]["server"]["set_name"] == "rs0"
        metrics = result["metrics"]
        # Its states as its hello gives them: a primary, down, a primary again (not a
        # standalone, which is what a server without replSetGetStatus was taken for).
        states = [s for _, s in metrics["member_states"][server.host]]
        assert states[0] == "PRIMARY" and "DOWN" in states and states[-1] == "PRIMARY", states
        assert metrics["recovery_s"][server.host] is not None
        assert 4.0 <= metrics["raw_write_unavailable_s"] <= 6.0, metrics
        # The audit (on by default) could compare nothing here, and says why: never consistent.
        audit = result["audit"]
        assert audit["consistent"] is None and "replSetGetStatus" in audit["error"], audit
        assert metrics["divergent_members"] is None


# A probe insert's commit in SQLite's write-ahead log: a frame (24-byte header, 4 KiB page)
# for each page it changes, a few at most.
ONE_COMMIT_BYTES = 8 * (24 + 4096)


@pytest.mark.slow
@pytest.mark.parametrize(("synchronous", "loses"),
                         [("full", False), ("normal", True), ("off", True)])  # fmt: skip
def test_a_power_loss_loses_the_acknowledged_writes_sqlite_had_not_synced(
    tmp_path: Path, synchronous: str, loses: bool
) -> None:
    # FerretDB acknowledges a write once SQLite has committed it; whether that commit reached
    # the disk is SQLite's `synchronous` setting: FULL (its default) syncs the write-ahead log
    # at every commit, NORMAL only at checkpoints, OFF never. faultfs's power loss drops every
    # byte not fsynced, and the ledger reads back what the restarted server still has.
    pragmas = f"_pragma=synchronous({synchronous})"
    with ferretdb(tmp_path / "ferretdb", faultfs=True, sqlite_pragmas=pragmas) as server:
        # The probes' database on disk before the run, as a deployment's databases are long
        # before a power loss. One created just before it can come back as a file without its
        # tables, which FerretDB will not start on ("no such table: _ferretdb_collections":
        # NORMAL on a loaded machine, the restart waited out its 60 s).
        with MongoClient(server.uri) as client:
            client.rsdrill_probe.settled.insert_one({})
        restart_cleanly(server)
        document = _on(server, "rs1-power-loss")
        del document["matrix"]
        document["probes"]["durability"]["journal"] = True
        code, output, out = run_cli(tmp_path, document, "--yes")
        result = result_of(out)
        metrics = result["metrics"]
        assert result["error"] is None, output
        dropped = result["faults"][0]["detail"]["unsynced_dropped"]
        if loses:
            assert code == 1, output
            assert metrics["lost_acknowledged_writes"] > 0, metrics
            # They went with SQLite's write-ahead log, never synced: bytes dropped, or the whole
            # file (-1) when not even its creation was.
            assert dropped.get("rsdrill_probe.sqlite-wal", 0) != 0, dropped
        else:
            assert code == 0, output
            assert metrics["lost_acknowledged_writes"] == 0
            # Every commit fsynced its write-ahead log: at most the shared-memory index, which
            # SQLite never syncs (it rebuilds it), is dropped, and the log's tail when the power
            # went in the middle of a commit, before its fsync (CI: 24 bytes, one frame header):
            # less than the few frames of one probe insert, never acknowledged.
            assert set(dropped) <= {"rsdrill_probe.sqlite-shm", "rsdrill_probe.sqlite-wal"}
            assert 0 <= dropped.get("rsdrill_probe.sqlite-wal", 0) < ONE_COMMIT_BYTES, dropped
        assert metrics["acknowledged_writes"] > 100


@pytest.mark.slow
def test_failing_disk_writes_stop_writes_for_the_fault_and_leave_reads_alone(
    tmp_path: Path,
) -> None:
    # Unlike mongod, which aborts on its first failed write, FerretDB answers each write the
    # disk refuses with an error and carries on: writes fail for exactly the fault's span.
    with ferretdb(tmp_path / "ferretdb", faultfs=True) as server:
        pid = server.pid()
        document = _on(server, "rs1-host-kill")
        document["faults"] = [{"at": "3s", "kind": "disk-fault", "errno": "EIO",
                               "operations": ["write"], "duration": "4s"}]  # fmt: skip
        document["slo"] = {"lost_acknowledged_writes": "== 0"}
        code, output, out = run_cli(tmp_path, document, "--yes")
        assert code == 0, output
        result = result_of(out)
        [fault] = result["faults"]
        assert fault["detail"]["operations"]["failed"] > 0
        metrics = result["metrics"]
        assert 3.5 <= metrics["write_unavailable_s"] <= 5.0, metrics
        assert metrics["read_unavailable_s"] < 1.0, metrics
        # The writes that failed failed as the server's errors, not as a dead server's.
        history = History.read_jsonl(out / "history.jsonl")
        failed = [op for op in history.ops("write") if not op.ok]
        assert failed and not any(op.detail.get("network") for op in failed)
        assert server.pid() == pid  # the same process throughout
        status = rsdrill_run(["faultfs", "status",
                                 str(server.dbpath)], capture_output=True, text=True,
                             timeout=30, check=True)  # fmt: skip
        assert not json.loads(status.stdout)["rules"], status.stdout  # reverted


@pytest.mark.parametrize(
    "fault",
    [{"at": "2s", "kind": "host-kill", "duration": "60s"},
     {"at": "2s", "kind": "disk-fault", "errno": "EIO", "operations": ["write"],
      "duration": "60s"}],
    ids=["host-kill", "disk-fault"],
)  # fmt: skip
def test_recover_reverts_what_a_killed_run_left_on_it(
    tmp_path: Path, fault: dict[str, Any]
) -> None:
    # The run dies (SIGKILL) with its fault in force: FerretDB down, or its disk refusing
    # writes. `rsdrill recover` reads the journal and undoes it: the member's own start
    # command, the faultfs rule cleared.
    with ferretdb(tmp_path / "ferretdb", faultfs=True) as server:
        document = _on(server, "rs1-host-kill")
        document["faults"] = [fault]
        path = tmp_path / "exp.json"
        path.write_text(json.dumps(document))
        env = {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}
        run = Rsdrill(
            ["run", str(path), "--out", str(tmp_path / "out"),
             "--no-live", "--no-history", "--yes"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env,
        )  # fmt: skip
        output = kill_after_line(run, "injected", 0.5)
        assert "injected" in output, output
        client = MongoClient(server.uri, serverSelectionTimeoutMS=1000, socketTimeoutMS=1000)
        collection = client["rsdrill_recover"]["c"]

        def writes() -> bool:
            try:
                collection.insert_one({})
                return True
            except PyMongoError:
                return False

        try:
            assert not writes()  # left in force by the dead run
            done = rsdrill_run(["recover"],
                               capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            assert "Traceback" not in done.stderr
            deadline = time.monotonic() + 20
            while not writes():
                assert time.monotonic() < deadline, "FerretDB still refuses writes"
                time.sleep(0.1)
            again = rsdrill_run(["recover"],
                                capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
            assert again.stdout.startswith("nothing to recover"), again.stdout
        finally:
            client.close()
