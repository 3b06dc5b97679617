"""A run's audit (`audit: quick`, the default) compares the members' data after the faults and
accounts for their rollbacks: a primary kill on the sandbox rs3 leaves them consistent, with
the figures in result.json, the SLO, the terminal, the summary and the report; a partitioned
primary's rollback is named, with the acknowledged writes it took."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import bson
import pytest

from rsdrill.analysis.invariants import unaccounted_losses
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.history import History
from rsdrill.result import Result
from rsdrill.sandbox.config import NO_ROLLBACK_FILES_ENV
from rsdrill.sandbox.groundtruth import all_events


def test_a_primary_kill_leaves_the_members_consistent(tmp_path: Path) -> None:
    result = run_experiment(
        Experiment.model_validate({
            "name": "audited-kill",
            "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
            "faults": [{"at": "2s", "kind": "host-kill", "select": "primary", "duration": "2s"}],
            "observe": {"after_revert": "10s"},
            "audit": "quick",
            "slo": {"divergent_members": "== 0", "audit_lag_s": "< 30", "validate_errors": "== 0"},
        }),
        RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path),
    )  # fmt: skip
    assert result.verdict == "pass", (result.error, result.slo, result.audit)
    audit = result.audit
    assert audit is not None and audit.error is None, audit
    assert audit.consistent and audit.caught_up and len(audit.members) == 3
    assert "rsdrill_probe" in audit.databases
    assert result.metrics.divergent_members == 0
    # Every probe collection validated on every member, none found not valid.
    assert audit.validated and audit.validated % 3 == 0 and audit.invalid == []
    assert result.metrics.validate_errors == 0
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["audit"]["consistent"] is True and saved["metrics"]["divergent_members"] == 0
    assert "### Data audit" in (tmp_path / "out" / "summary.md").read_text()
    assert 'id="audit"' in (tmp_path / "out" / "report.html").read_text()


def test_an_slo_on_the_audit_without_it_is_refused_at_load() -> None:
    from rsdrill.fields import FieldProblem  # noqa: F401 (raised through pydantic)

    with pytest.raises(ValueError, match="the data audit"):
        Experiment.model_validate({
            "name": "x", "target": {"platform": "sandbox"},
            "faults": [{"at": "1s", "kind": "stepdown"}], "audit": "off",
            "slo": {"divergent_members": "== 0"},
        })  # fmt: skip


def _partitioned_primary_kill(tmp_path: Path, w: int | str) -> Result:
    """The two secondaries frozen while the primary takes writes it cannot replicate, then the
    primary killed: the others elect a new primary, and the old one rolls its writes back when
    it rejoins (journaled, so they survive its kill to be rolled back).

    The old primary comes back 8 s after its kill, time for two election attempts of the
    others: resumed together, both call their first at the same timeout (the primary's last
    answer reset both timers), and they split the vote when their random offsets fall a few
    ms apart. Seen once with a return 4 s after the kill: the second attempt came after it,
    the others caught up from the old primary, and nothing was left to roll back."""
    return run_experiment(
        Experiment.model_validate({
            "name": f"rollback-w{w}",
            "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "2s"},
            "probes": {"durability": {"write_concern": w, "journal": True, "interval": "20ms"}},
            "faults": [
                {"at": "2s", "kind": "host-freeze", "select": {"count": 2, "role": "secondary"},
                 "duration": "2s"},
                {"at": "3.5s", "kind": "host-kill", "select": "primary",
                 "restart": {"after": "8s"}},
            ],
            "observe": {"after_revert": "20s"},
            "guards": {"allow_quorum_loss": True},
            "audit": "quick",
        }),
        RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path),
    )  # fmt: skip


def test_the_audit_names_the_acknowledged_w1_writes_a_rollback_took(tmp_path: Path) -> None:
    result = _partitioned_primary_kill(tmp_path, 1)
    assert result.verdict == "pass", result.error
    audit, metrics = result.audit, result.metrics
    assert audit is not None and audit.rollbacks_accounted, audit
    old_primary = result.faults[-1].target
    (rollback,) = audit.rollbacks
    assert rollback.member == old_primary and rollback.rollbacks == 1 and rollback.readable
    # The files as mongod writes them (a folder per collection UUID), read independently here
    # with pymongo's bson, each named by the namespace the emulator logged for it.
    logged = {path: ns
              for event in all_events(tmp_path / "out" / "sandbox")
              if event["event"] == "rollback_end" and event["member"] == old_primary
              for path, ns in event["namespaces"].items()}  # fmt: skip
    assert all(uuid.UUID(Path(f).parent.name) for f in rollback.files), rollback.files
    in_files = {logged[f]: len(bson.decode_all(Path(f).read_bytes())) for f in rollback.files}
    assert rollback.namespaces == in_files and metrics.rolled_back_writes == sum(in_files.values())
    (taken,) = rollback.acknowledged
    assert taken.write_concern == "w:1, j:true" and taken.probe in ("ledger", "write")
    # The same writes the ledger found missing after recovery: two analyses, one answer.
    assert taken.seqs and taken.seqs == metrics.lost_acknowledged_seqs
    assert metrics.rolled_back_acknowledged_writes == len(taken.seqs)
    assert audit.consistent, audit  # after the rollback the members agree again
    # Against the ground truth: the files the emulator says its rollback wrote, and the
    # acknowledgements the probe recorded.
    ops = History.read_jsonl(tmp_path / "out" / "history.jsonl").ops()
    rolled_back = {
        doc["_id"]
        for event in all_events(tmp_path / "out" / "sandbox")
        if event["event"] == "rollback_end" and event["member"] == old_primary
        for path, ns in event["namespaces"].items() if ns.endswith(f"_{taken.probe}")
        for doc in bson.decode_all(Path(path).read_bytes())
    }  # fmt: skip
    acknowledged = {op.detail["seq"] for op in ops
                    if op.probe == taken.probe and op.op == "insert" and op.ok}  # fmt: skip
    assert taken.seqs == sorted(rolled_back & acknowledged)
    # Every loss is accounted for by a rollback file: the soak's unaccounted-loss holds.
    assert unaccounted_losses(ops, audit) == []
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["audit"]["rollbacks"][0]["acknowledged"][0]["seqs"] == taken.seqs
    assert old_primary in (tmp_path / "out" / "summary.md").read_text().split("### Data audit")[1]


def test_with_majority_writes_the_same_schedule_rolls_back_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    result = _partitioned_primary_kill(tmp_path, "majority")
    assert result.verdict == "pass", result.error
    audit, metrics = result.audit, result.metrics
    assert audit is not None and audit.rollbacks_accounted, audit
    (rollback,) = audit.rollbacks
    # The old primary still rolled back what it had written alone; none was acknowledged.
    assert rollback.rollbacks == 1 and metrics.rolled_back_writes
    assert rollback.acknowledged == [] and metrics.rolled_back_acknowledged_writes == 0
    assert metrics.lost_acknowledged_writes == 0


def test_a_rollback_that_writes_no_file_is_an_unaccounted_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NO_ROLLBACK_FILES_ENV, "1")  # planted: rollbacks save nothing
    result = _partitioned_primary_kill(tmp_path, 1)
    assert result.verdict == "pass", result.error
    audit, metrics = result.audit, result.metrics
    assert audit is not None
    (rollback,) = audit.rollbacks
    assert rollback.rollbacks == 1 and rollback.files == [] and metrics.rolled_back_writes == 0
    assert metrics.lost_acknowledged_seqs, "the ledger lost nothing"
    ops = History.read_jsonl(tmp_path / "out" / "history.jsonl").ops()
    [violation] = unaccounted_losses(ops, audit)
    assert violation.invariant == "unaccounted-loss"
    assert f"{len(metrics.lost_acknowledged_seqs)} acknowledged write(s)" in violation.detail
