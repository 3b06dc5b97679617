"""The transactions probe against the sandbox rs3: list-append transactions from two clients
across a primary kill, checked as Elle checks them. The emulator runs transactions under
snapshot isolation with majority writes, so the history has no anomaly; the transactions the
kill cut short are recorded as aborted or unknown, never as committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.history import TXN_PROBE, History
from rsdrill.sandbox.config import UNSAFE_SNAPSHOT_ENV


def test_transactions_across_a_primary_kill_have_no_anomaly(tmp_path: Path) -> None:
    result = run_experiment(
        Experiment.model_validate({
            "name": "txn-kill",
            "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
            "probes": {"transactions": {"keys": 4, "txn_len": "1-4", "clients": 2}},
            "faults": [{"at": "3s", "kind": "host-kill", "select": "primary", "duration": "2s"}],
            "observe": {"after_revert": "5s"},
            "slo": {"transaction_anomalies": "== 0"},
        }),
        RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path),
    )  # fmt: skip
    m = result.metrics
    assert result.verdict == "pass", (result.error, result.slo, m.transaction_cycles)
    ops = [op for op in History.read_jsonl(tmp_path / "out" / "history.jsonl").ops()
           if op.probe == TXN_PROBE]  # fmt: skip
    statuses = {op.detail["status"] for op in ops}
    committed = [op for op in ops if op.detail["status"] == "ok"]
    # Both clients committed transactions, reads saw lists, and the kill cut some short.
    assert {op.detail["client"] for op in committed} == {0, 1}
    assert any(mop[0] == "r" and mop[2] for op in committed for mop in op.detail["mops"])
    assert statuses - {"ok"}, "the primary kill ended no transaction early"
    assert m.transactions_checked == len(ops) and m.transaction_anomalies == 0
    assert m.transaction_anomaly_types == [] and m.transaction_cycles == []
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["metrics"]["transaction_anomalies"] == 0


def test_a_server_whose_transactions_read_past_their_snapshot_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted anomaly: members started with UNSAFE_SNAPSHOT_ENV read the newest data at
    every statement of a transaction, so a transaction can see one of another's appends and
    not the other (read skew). The checker must find it and the SLO fail."""
    monkeypatch.setenv(UNSAFE_SNAPSHOT_ENV, "1")
    result = run_experiment(
        Experiment.model_validate({
            "name": "txn-broken-snapshot",
            "target": {"platform": "sandbox", "topology": "rs3"},
            "probes": {"transactions": {"keys": 3, "txn_len": "2-4", "clients": 4,
                                        "interval": "10ms"}},
            "faults": [{"at": "8s", "kind": "stepdown", "select": "primary"}],
            "observe": {"after_revert": "1s"},
            "slo": {"transaction_anomalies": "== 0"},
        }),
        RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path),
    )  # fmt: skip
    m = result.metrics
    assert result.verdict == "fail", (result.error, m.transactions_checked)
    assert m.transaction_anomalies and m.transaction_anomalies > 0
    assert {"G-single", "G2-item", "G1c"} & set(m.transaction_anomaly_types), m
    assert m.transaction_cycles and m.transaction_cycles[0].startswith("G"), m
