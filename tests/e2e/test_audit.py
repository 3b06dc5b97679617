"""`rsdrill audit URI` against a real sandbox rs3: consistent members pass; a secondary whose
stored document was changed behind its back (while it was stopped) is named with the collection
and the `_id`, one whose record is not under its own `_id` is also not valid, one whose oplog
entry was rewritten is named with the entry; a member that cannot be compared is one line and
exit 2, never "consistent"."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bson
import pytest
from pymongo import MongoClient

from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import DATA_FILE, MemberSpec, Settings, build_topology, member_dir
from rsdrill_emulator.datastore import id_key
from tests.harness.cli import rsdrill_run


def _audit(*args: str) -> subprocess.CompletedProcess[str]:
    return rsdrill_run(["audit", *args],
                       capture_output=True, text=True, timeout=120)  # fmt: skip


def _change_a_stopped_secondary(
    sandbox: Sandbox, change: Callable[[sqlite3.Connection], object]
) -> MemberSpec:
    """A secondary stopped, `change` made in its own database file, the member restarted."""
    with MongoClient(sandbox.uri, serverSelectionTimeoutMS=20_000) as client:
        primary = client.admin.command("hello")["primary"]
    secondary = next(m for m in sandbox.spec.members if m.host != primary)
    sandbox.kill(secondary)
    data = sqlite3.connect(member_dir(sandbox.directory, secondary) / "data" / DATA_FILE)
    with data:
        change(data)
    data.close()
    sandbox.start(secondary)
    return secondary


def _audit_when_up(sandbox: Sandbox) -> subprocess.CompletedProcess[str]:
    """The audit once a restarted member is SECONDARY again (it refuses members not up)."""
    deadline = time.monotonic() + 30
    while True:
        done = _audit(sandbox.uri)
        if done.returncode != 2 or time.monotonic() > deadline:
            return done
        time.sleep(0.5)


@pytest.fixture
def rs3(sandbox_dir: Path, free_port_base: Any) -> Sandbox:
    spec = build_topology("rs3", port_base=free_port_base(3),
                          settings=Settings(election_timeout_ms=1000))  # fmt: skip
    sandbox = up(sandbox_dir, spec, EmulatorEngine())
    with MongoClient(sandbox.uri, w=3, serverSelectionTimeoutMS=20_000) as client:
        client.shop.orders.insert_many([{"_id": i, "total": i * 10} for i in range(20)])
        client.shop.users.insert_one({"_id": "ann"})
    return sandbox


def test_consistent_members_pass(rs3: Sandbox) -> None:
    done = _audit(rs3.uri, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["consistent"] and report["databases"] == ["shop"], report
    assert len(report["members"]) == 3 and report["divergences"] == []
    # validate on every member: shop.orders and shop.users, three times.
    assert report["validated"] == 6 and report["invalid"] == [], report
    assert report["oplog_compared"] == 20 and report["oplog_differences"] == [], report


def test_a_document_changed_behind_a_members_back_is_named(rs3: Sandbox) -> None:
    def rewrite(data: sqlite3.Connection) -> None:  # the stored document of _id 7
        changed = data.execute(
            "UPDATE docs SET doc = ? WHERE ns = ? AND k = ?",
            (bson.encode({"_id": 7, "total": 71}), "shop.orders", id_key(7)),
        )
        assert changed.rowcount == 1

    secondary = _change_a_stopped_secondary(rs3, rewrite)
    done = _audit_when_up(rs3)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"divergent: {secondary.host} shop.orders (_id 7)"]


def test_a_record_not_under_its_own_id_is_divergent_and_not_valid(rs3: Sandbox) -> None:
    secondary = _change_a_stopped_secondary(rs3, lambda data: data.execute(
        "UPDATE docs SET doc = ? WHERE ns = ? AND k = ?",  # the record under _id 7 says 77
        (bson.encode({"_id": 77, "total": 70}), "shop.orders", id_key(7)),
    ))  # fmt: skip
    done = _audit_when_up(rs3)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"divergent: {secondary.host} shop.orders (_id 7, 77)" in lines, lines
    [invalid] = [line for line in lines if line.startswith("not valid: ")]
    assert invalid.startswith(f"not valid: {secondary.host} shop.orders (") and "_id" in invalid


def test_an_oplog_entry_changed_behind_a_members_back_is_named(rs3: Sandbox) -> None:
    rewritten: dict[str, Any] = {}

    def rewrite(data: sqlite3.Connection) -> None:  # the insert of "ann" now says "bob"
        rows = data.execute("SELECT rowid, entry FROM oplog ORDER BY t DESC, secs DESC, inc DESC")
        rowid, entry = next((r, bson.decode(e)) for r, e in rows
                            if bson.decode(e).get("ns") == "shop.users")  # fmt: skip
        entry["o"] = {"_id": "bob"}
        data.execute("UPDATE oplog SET entry = ? WHERE rowid = ?", (bson.encode(entry), rowid))
        rewritten.update(entry)

    secondary = _change_a_stopped_secondary(rs3, rewrite)
    done = _audit_when_up(rs3)
    assert done.returncode == 1, done.stdout + done.stderr
    ts = rewritten["ts"]
    assert done.stdout.splitlines() == [
        f"oplog differs: {secondary.host} Timestamp({ts.time}, {ts.inc}) (term {rewritten['t']}): "
        "differs"
    ], done.stdout


def test_a_database_no_member_holds_is_refused_not_consistent(rs3: Sandbox) -> None:
    """A misspelt --db hashed as empty on every member: `consistent`, exit 0."""
    done = _audit(rs3.uri, "--db", "shpo")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and "consistent" not in done.stderr
    assert done.stderr.strip().endswith("no member holds database shpo (databases: shop)")
    assert _audit(rs3.uri, "--db", "shop").returncode == 0


def test_a_member_that_is_down_is_one_line_and_exit_2(rs3: Sandbox) -> None:
    with MongoClient(rs3.uri, serverSelectionTimeoutMS=20_000) as client:
        primary = client.admin.command("hello")["primary"]
    secondary = next(m for m in rs3.spec.members if m.host != primary)
    rs3.kill(secondary)
    deadline = time.monotonic() + 30
    while True:  # until the primary's heartbeats see it down
        done = _audit(rs3.uri, "--catch-up", "2")
        if done.returncode == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    # Named as not up once the primary's heartbeats say so, as unreachable before that.
    assert secondary.host in done.stderr, done.stderr
    assert "not up" in done.stderr or "unreachable" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_nothing_answering_is_one_line_and_exit_2(free_port_base: Any) -> None:
    port = free_port_base(1)
    done = _audit(f"mongodb://127.0.0.1:{port}/?replicaSet=rs0&connectTimeoutMS=500")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert f"127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr


def test_a_single_member_is_never_called_consistent(sandbox_dir: Path, free_port_base: Any) -> None:
    spec = build_topology("rs1", port_base=free_port_base(1), settings=Settings())
    sandbox = up(sandbox_dir, spec, EmulatorEngine())
    try:
        done = _audit(sandbox.uri)
    finally:
        sandbox.down()
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert "nothing to compare it with" in done.stderr and len(done.stderr.splitlines()) == 1
