"""Rollback accounting as pure functions of what the members said and the run's history, and
the reading of rollback files as mongod lays them out (by namespace up to 4.2, by collection
UUID from 4.4)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import bson

from rsdrill.analysis.invariants import unaccounted_losses
from rsdrill.analysis.rollbacks import (
    RollbackFile,
    Writer,
    account,
    rollback_figures,
    write_concern_words,
)
from rsdrill.engine.rollbacks import rollback_files
from rsdrill.history import Op
from rsdrill.result import AuditResult

A, B, C = "h:1", "h:2", "h:3"
LEDGER = Writer("ledger", "rsdrill_probe.run_x_ledger", "w:1")


def _insert(seq: int, outcome: str = "ok") -> Op:
    return Op("ledger", "insert", A, seq * 0.1, seq * 0.1 + 0.01, outcome, {"seq": seq})


def test_only_acknowledged_seqs_of_the_writers_namespace_count() -> None:
    ops = [_insert(1), _insert(2), _insert(3, "timeout"), _insert(4)]
    files = {
        A: [RollbackFile(LEDGER.namespace, "f1", (2, 3, 4, 5)),
            RollbackFile("shop.orders", "f2", (2, "x"))],
        B: [], C: [],
    }  # fmt: skip
    [entry] = account({A: 7, B: 1, C: 1}, {A: 8, B: 1, C: 1}, files, [LEDGER], ops)
    assert entry.member == A and entry.rollbacks == 1 and entry.readable
    assert entry.namespaces == {LEDGER.namespace: 4, "shop.orders": 2}
    # 3 timed out and 5 was never sent: taken, but not acknowledged; shop.orders has no writer.
    [taken] = entry.acknowledged
    assert (taken.probe, taken.write_concern, taken.seqs) == ("ledger", "w:1", [2, 4])


def test_a_member_that_did_not_roll_back_is_left_out_and_one_not_known_is_kept() -> None:
    entries = account({A: 1, B: 1, C: None}, {A: 1, B: 1, C: None},
                      {A: [], B: None, C: None}, [LEDGER], [])  # fmt: skip
    # B: its files unreadable, but its rollback id did not move; C: neither is known.
    assert [(e.member, e.rollbacks, e.readable) for e in entries] == [(C, None, False)]


def test_the_figures_are_unknown_when_a_rollback_could_not_be_read() -> None:
    ops = [_insert(1)]
    seen = account({A: 1, B: 1}, {A: 2, B: 1}, {A: [RollbackFile(LEDGER.namespace, "f", (1,))],
                                                B: []}, [LEDGER], ops)  # fmt: skip
    assert rollback_figures(AuditResult(rollbacks_accounted=True, rollbacks=seen)) == (1, 1)
    # Two members rolling the same acknowledged write back: two documents, one write lost.
    both = account({A: 1, B: 1}, {A: 2, B: 2}, {A: [RollbackFile(LEDGER.namespace, "f", (1,))],
                                                B: [RollbackFile(LEDGER.namespace, "g", (1,))]},
                   [LEDGER], ops)  # fmt: skip
    assert rollback_figures(AuditResult(rollbacks_accounted=True, rollbacks=both)) == (2, 1)
    blind = account({A: 1}, {A: 3}, {A: None}, [LEDGER], ops)
    assert blind[0].rollbacks == 2 and not blind[0].readable
    assert rollback_figures(AuditResult(rollbacks_accounted=True, rollbacks=blind)) == (None, None)
    assert rollback_figures(AuditResult(rollbacks_accounted=True)) == (0, 0)
    assert rollback_figures(AuditResult()) == (None, None)  # not accounted
    assert rollback_figures(None) == (None, None)


def test_write_concerns_read_as_results_say_them() -> None:
    assert write_concern_words({"w": 1}) == "w:1"
    assert write_concern_words({"j": True, "w": "majority"}) == "w:majority, j:true"
    assert write_concern_words({"wtimeout": 100, "w": 2}) == "w:2, wtimeout:100"


def test_rollback_files_by_namespace_and_by_uuid_since_the_run_started(tmp_path: Path) -> None:
    folder_uuid = uuid.uuid4()
    old = tmp_path / "rollback" / "db.c" / "removed.2026-01-01T00-00-00.0.bson"
    by_ns = tmp_path / "rollback" / "db.c" / "removed.2026-11-28T10-00-00.0.bson"
    by_uuid = tmp_path / "rollback" / str(folder_uuid) / "removed.2026-11-28T10-00-01.0.bson"
    for path, ids in ((old, [0]), (by_ns, [1, 2]), (by_uuid, ["a"])):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(bson.encode({"_id": i, "v": 1}) for i in ids))
    os.utime(old, (1_000, 1_000))  # an earlier run's rollback: not this run's
    found = rollback_files(tmp_path, 2_000, {str(folder_uuid): "db.d"})
    assert found is not None
    assert sorted((f.namespace, f.ids) for f in found) == [("db.c", (1, 2)), ("db.d", ("a",))]
    # No rollback folder at all: nothing rolled back there.
    assert rollback_files(tmp_path / "elsewhere", 0, {}) == []


def test_a_file_that_is_not_bson_makes_the_member_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "rollback" / "db.c" / "removed.x.bson"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x05\x00\x00")
    assert rollback_files(tmp_path, 0, {}) is None


def test_a_loss_is_accounted_for_only_by_a_rollback_file_of_its_writer() -> None:
    ops = [
        _insert(1),
        _insert(2),
        _insert(3),
        Op("ledger", "readback", None, 9.0, 9.1, "ok", {"missing": [2, 3], "of": "ledger"}),
    ]
    taken = account({A: 1}, {A: 2}, {A: [RollbackFile(LEDGER.namespace, "f", (2,))]},
                    [LEDGER], ops)  # fmt: skip
    audit = AuditResult(rollbacks_accounted=True, rollbacks=taken)
    [violation] = unaccounted_losses(ops, audit)
    assert violation.invariant == "unaccounted-loss" and "(seq 3)" in violation.detail
    whole = account({A: 1}, {A: 2}, {A: [RollbackFile(LEDGER.namespace, "f", (2, 3))]},
                    [LEDGER], ops)  # fmt: skip
    assert unaccounted_losses(ops, AuditResult(rollbacks_accounted=True, rollbacks=whole)) == []
    # Files that cannot be read, or no accounting: nothing can be said.
    blind = account({A: 1}, {A: 2}, {A: None}, [LEDGER], ops)
    assert unaccounted_losses(ops, AuditResult(rollbacks_accounted=True, rollbacks=blind)) == []
    assert unaccounted_losses(ops, AuditResult()) == []
