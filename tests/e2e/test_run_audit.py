"""A run with `audit: quick` compares the members' data after the faults: a primary kill on the
sandbox rs3 leaves them consistent, with the figures in result.json, the SLO, the terminal, the
summary and the report."""

from __future__ import annotations

import json
from pathlib import Path

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment


def test_a_primary_kill_leaves_the_members_consistent(tmp_path: Path) -> None:
    result = run_experiment(
        Experiment.model_validate({
            "name": "audited-kill",
            "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
            "faults": [{"at": "2s", "kind": "host-kill", "select": "primary", "duration": "2s"}],
            "observe": {"after_revert": "10s"},
            "audit": "quick",
            "slo": {"divergent_members": "== 0", "audit_lag_s": "< 30"},
        }),
        RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path),
    )  # fmt: skip
    assert result.verdict == "pass", (result.error, result.slo, result.audit)
    audit = result.audit
    assert audit is not None and audit.error is None, audit
    assert audit.consistent and audit.caught_up and len(audit.members) == 3
    assert "rsdrill_probe" in audit.databases
    assert result.metrics.divergent_members == 0
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["audit"]["consistent"] is True and saved["metrics"]["divergent_members"] == 0
    assert "### Data audit" in (tmp_path / "out" / "summary.md").read_text()
    assert 'id="audit"' in (tmp_path / "out" / "report.html").read_text()


def test_an_slo_on_the_audit_without_it_is_refused_at_load() -> None:
    import pytest

    from rsdrill.fields import FieldProblem  # noqa: F401 (raised through pydantic)

    with pytest.raises(ValueError, match="the data audit"):
        Experiment.model_validate({
            "name": "x", "target": {"platform": "sandbox"},
            "faults": [{"at": "1s", "kind": "stepdown"}], "slo": {"divergent_members": "== 0"},
        })  # fmt: skip
