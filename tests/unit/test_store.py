"""Run history: recording hand-made results, reading them back, regression detection, and the
`rsdrill history` and `rsdrill run --history` commands."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from history_sample import NOISE, OUTLIER_AT, T0, make_result
from typer.testing import CliRunner

from rsdrill import store
from rsdrill.cli.app import app
from rsdrill.result import Metrics, Result
from rsdrill.runs import Run


def record_all(db: Path, results: list[Result], tmp_path: Path) -> None:
    for i, result in enumerate(results):
        store.record(result, tmp_path / f"run-{i}", db)


def nightly(outlier: float | None = 25.3) -> list[Result]:
    """20 nights; the one at OUTLIER_AT had a write gap of `outlier` (None: a normal night)."""
    return [
        make_result(day, outlier if day == OUTLIER_AT and outlier else 11.0 + noise)
        for day, noise in enumerate(NOISE)
    ]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "results" / "history.sqlite"


# -- record and history ------------------------------------------------------------------------


def test_record_writes_the_run_and_its_scalar_metrics(db: Path, tmp_path: Path) -> None:
    run_id = store.record(make_result(0, 11.11, lost=2), tmp_path / "out", db)
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT experiment, started_at, verdict, duration_s, out_dir, metrics FROM run"
        ).fetchone()
        metrics = dict(conn.execute("SELECT name, value FROM metric WHERE run_id = ?", (run_id,)))
    experiment, started_at, verdict, duration_s, out_dir, metrics_json = row
    assert (experiment, verdict, duration_s) == ("rs3-primary-kill", "pass", 41.5)
    assert started_at == "2024-05-01T02:00:00.000000+00:00"
    assert out_dir == str((tmp_path / "out").resolve())
    assert Metrics.model_validate_json(metrics_json) == make_result(0, 11.11, lost=2).metrics
    assert metrics["write_unavailable_s"] == 11.11
    assert metrics["lost_acknowledged_writes"] == 2
    assert metrics["latency_ms.p99"] == 6.0
    assert metrics["recovery_s.127.0.0.1:28017"] == 0.84
    assert metrics["recovery_s.max"] == 0.84
    # Not measured is recorded as NULL, not left out.
    assert "read_unavailable_s" in metrics and metrics["read_unavailable_s"] is None


def test_history_reads_runs_back_oldest_first_and_filters(db: Path, tmp_path: Path) -> None:
    # Recorded out of order (a slow run finishing after a later one started).
    record_all(db, [make_result(2), make_result(0), make_result(1, experiment="rs1-host-kill")],
               tmp_path)  # fmt: skip
    runs = store.history(db)
    assert [r.started_at.day for r in runs] == [1, 2, 3]
    assert runs[0].started_at == T0 and runs[0].started_at.tzinfo is not None
    assert runs[0].metrics["write_unavailable_s"] == 11.0
    assert runs[0].out_dir == (tmp_path / "run-1").resolve()
    assert [r.experiment for r in store.history(db, experiment="rs1-host-kill")] == [
        "rs1-host-kill"
    ]
    assert [r.started_at.day for r in store.history(db, since=dt.date(2024, 5, 2))] == [2, 3]
    since = dt.datetime(2024, 5, 2, 2, 0, 1)  # naive: UTC
    assert [r.started_at.day for r in store.history(db, since=since)] == [3]
    assert store.history(db, experiment="rs1-host-kill", since=dt.date(2024, 5, 3)) == []


def test_history_of_a_missing_file_is_empty_and_creates_nothing(db: Path) -> None:
    assert store.history(db) == []
    assert not db.exists()


def test_record_into_an_unusable_path_raises_store_error(tmp_path: Path) -> None:
    (tmp_path / "dir.sqlite").mkdir()
    with pytest.raises(store.StoreError, match=r"dir\.sqlite"):
        store.record(make_result(0), tmp_path, tmp_path / "dir.sqlite")


# -- regressions -------------------------------------------------------------------------------


def test_twenty_runs_with_one_outlier_flag_exactly_that_one(db: Path, tmp_path: Path) -> None:
    record_all(db, nightly(), tmp_path)
    runs = store.history(db)
    found = store.regressions(runs)
    assert [(g.run.started_at.day, g.metric) for g in found] == [
        (OUTLIER_AT + 1, "write_unavailable_s"),
        (OUTLIER_AT + 1, "failover_s"),
    ]
    write_gap = found[0]
    assert write_gap.value == 25.3
    assert write_gap.baseline.size == 10
    assert 10.9 < write_gap.baseline.median < 11.2
    assert write_gap.baseline.threshold < 13


def test_without_the_outlier_nothing_is_flagged(db: Path, tmp_path: Path) -> None:
    record_all(db, nightly(outlier=None), tmp_path)
    assert store.regressions(store.history(db)) == []


def test_a_flat_history_does_not_flag_jitter(db: Path, tmp_path: Path) -> None:
    # MAD 0: without its floor, 11.05 after nineteen 11.0s would be "infinitely" far out.
    results = [make_result(day, 11.0) for day in range(19)] + [make_result(19, 11.05)]
    record_all(db, results, tmp_path)
    assert store.regressions(store.history(db), ["write_unavailable_s"]) == []


def test_a_first_lost_write_after_a_flat_zero_history_is_flagged(db: Path, tmp_path: Path) -> None:
    results = [make_result(day) for day in range(10)] + [make_result(10, lost=1)]
    record_all(db, results, tmp_path)
    found = store.regressions(store.history(db), ["lost_acknowledged_writes"])
    assert [(g.run.started_at.day, g.value) for g in found] == [(11, 1.0)]


def test_runs_need_a_baseline_and_only_whole_runs_count(db: Path, tmp_path: Path) -> None:
    results = [
        make_result(0, 11.0),
        make_result(1, 40.0),  # too early to judge: no baseline yet
        *[make_result(day, 11.0) for day in range(2, 8)],
        make_result(8, 60.0, verdict="error"),  # a partial run is neither judged nor a baseline
        make_result(9, 60.0, verdict="aborted"),
        make_result(10, 30.0, verdict="fail"),  # an SLO failure is still a measurement
        make_result(11, 12.0, experiment="other"),  # other experiments have their own baseline
    ]
    record_all(db, results, tmp_path)
    runs = store.history(db)
    found = store.regressions(runs, ["write_unavailable_s"])
    assert [(g.run.started_at.day, g.run.verdict) for g in found] == [(11, "fail")]
    baselines = store.baselines(runs, "write_unavailable_s")
    assert baselines[found[0].run.id].size == 8
    assert {r.started_at.day for r in runs if r.id in baselines} == {6, 7, 8, 11}


def test_window_and_k_are_respected() -> None:
    values = [10, 12, 14, 16, 18, 10, 12, 14, 16, 18, 21]
    runs = [
        Run(i, "x", T0 + dt.timedelta(days=i), "pass", 1.0, Path("."), {"m": v})
        for i, v in enumerate(values)
    ]
    # The last run's baseline: median 14, MAD 2, so the threshold is 14 + k * 1.4826 * 2.
    baseline = store.baselines(runs, "m")[10]
    assert (baseline.median, baseline.mad, baseline.size) == (14, 2, 10)
    assert baseline.threshold == pytest.approx(14 + 3 * 1.4826 * 2)
    assert [g.run.id for g in store.regressions(runs, ["m"], k=2.0)] == [10]
    assert store.regressions(runs, ["m"], k=3.0) == []
    # A window of 3 keeps 14, 16, 18: median 16, MAD 2, threshold 21.9 with k = 2.
    assert store.baselines(runs, "m", window=3)[10].median == 16
    assert store.regressions(runs, ["m"], k=2.0, window=3) == []


# -- the command line --------------------------------------------------------------------------


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_history_command_marks_the_regression_and_fails_when_it_is_the_newest(
    db: Path, tmp_path: Path
) -> None:
    results = nightly()
    record_all(db, results[: OUTLIER_AT + 1], tmp_path)  # the outlier is the newest run
    code, out, err = invoke("history", "--db", str(db), "--fail-on-regression")
    assert code == 1, out + err
    assert "rs3-primary-kill: 15 runs, 2 regressions" in out
    assert "2024-05-15 02:00:00  pass     25.3 !" in out
    assert "rs3-primary-kill 2024-05-15 02:00:00: write_unavailable_s 25.3 >" in out
    assert "newest run regressed: rs3-primary-kill" in err
    # Without the flag, the same history is only reported.
    assert invoke("history", "--db", str(db))[0] == 0


def test_history_command_passes_once_newer_runs_are_normal(db: Path, tmp_path: Path) -> None:
    record_all(db, nightly(), tmp_path)
    code, out, _ = invoke("history", "--db", str(db), "--fail-on-regression")
    assert code == 0
    assert "25.3 !" in out  # still marked where it happened


def test_history_command_metric_and_since_options(db: Path, tmp_path: Path) -> None:
    record_all(db, nightly(), tmp_path)
    code, out, _ = invoke(
        "history", "--db", str(db), "--metric", "latency_ms.p99", "--metric", "acknowledged_writes",
        "--since", "2024-05-18",
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "rs3-primary-kill: 3 runs"
    assert lines[1].split() == ["time", "(UTC)", "verdict", "latency_ms.p99", "acknowledged_writes"]
    assert lines[2].split() == ["2024-05-18", "02:00:00", "pass", "6.2", "2017"]
    assert invoke("history", "--db", str(db), "--metric", "nonsense")[0] == 2
    assert invoke("history", "--db", str(db), "--since", "yesterday")[0] == 2


def test_history_json_has_the_tables_content_and_keeps_the_exit_status(
    db: Path, tmp_path: Path
) -> None:
    results = nightly()
    record_all(db, results[: OUTLIER_AT + 1], tmp_path)  # the outlier is the newest run
    code, out, err = invoke("history", "--db", str(db), "--json", "--fail-on-regression",
                            "--since", "2024-05-14")  # fmt: skip
    assert code == 1 and "newest run regressed: rs3-primary-kill" in err
    shown = json.loads(out)  # nothing but the JSON on stdout
    assert shown["metrics"] == list(store.KEY_METRICS)
    assert (shown["k"], shown["window"]) == (3.0, 10)
    assert [r["started_at"] for r in shown["runs"]] == [
        "2024-05-14T02:00:00+00:00", "2024-05-15T02:00:00+00:00",
    ]  # fmt: skip
    newest = shown["runs"][-1]
    assert newest["verdict"] == "pass" and newest["metrics"]["write_unavailable_s"] == 25.3
    assert newest["metrics"]["lost_acknowledged_writes"] == 0
    assert newest["out_dir"] == str((tmp_path / f"run-{OUTLIER_AT}").resolve())
    assert sorted(newest["regressed"]) == ["failover_s", "write_unavailable_s"]
    assert shown["runs"][0]["regressed"] == []
    (gap,) = [g for g in shown["regressions"] if g["metric"] == "write_unavailable_s"]
    assert gap["run_id"] == newest["id"] and gap["value"] == 25.3
    assert gap["median"] < gap["threshold"] < 25.3 and gap["baseline_runs"] == 10
    assert shown["newest_regressed"] == ["rs3-primary-kill"]
    # Same runs as the table, which says so in text.
    assert "rs3-primary-kill: 2 runs, 2 regressions" in invoke(
        "history", "--db", str(db), "--since", "2024-05-14")[1]  # fmt: skip
    assert invoke("history", "--db", str(db), "--json", "--format", "openmetrics")[0] == 2


def test_history_json_of_an_empty_history_is_an_empty_list(db: Path) -> None:
    code, out, _ = invoke("history", "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["runs"] == []


def test_history_command_on_an_empty_history(db: Path) -> None:
    code, out, _ = invoke("history", "--db", str(db))
    assert (code, out.strip()) == (0, f"no runs recorded in {db}")


def test_a_regression_gate_with_no_runs_to_judge_is_refused(db: Path, tmp_path: Path) -> None:
    """A mistyped --db or --experiment left the nightly gate nothing to judge, and it passed."""
    typo = tmp_path / "histroy.db"
    code, out, err = invoke("history", "--db", str(typo), "--fail-on-regression")
    assert (code, out) == (2, "")
    assert err.strip() == f"--fail-on-regression: no runs recorded in {typo}: nothing to check"
    assert not typo.exists()
    code, out, err = invoke("history", "--db", str(db), "--experiment", "rs3-primry-kill",
                            "--fail-on-regression", "--json")  # fmt: skip
    assert code == 2 and "no runs recorded" in err + out and "that match" in err + out


@pytest.mark.parametrize("name", ["trend.svg", "trend.html"])
def test_history_chart_is_one_self_contained_file(db: Path, tmp_path: Path, name: str) -> None:
    results = nightly()
    results.append(make_result(20, None, experiment="rs1-host-kill"))
    record_all(db, results, tmp_path)
    chart = tmp_path / "charts" / name
    code, out, _ = invoke("history", "--db", str(db), "--chart", str(chart))
    assert code == 0 and f"chart: {chart}" in out
    text = chart.read_text()
    if name.endswith(".svg"):
        root = ET.fromstring(text)  # well-formed, and a real SVG document
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        # The namespace name is the only URI: nothing is fetched.
        assert text.count("://") == 1
    else:
        assert text.startswith("<!DOCTYPE html>") and "://" not in text
        assert "<script" not in text
    # One panel per experiment and metric, and the outlier drawn as a regression.
    assert text.count("<g>") == 2 * len(store.KEY_METRICS)
    assert text.count('class="point regression"') == 2
    assert "2024-05-15 02:00:00 UTC pass: 25.3" in text


# -- `rsdrill run` records its run ---------------------------------------------------------------


EXPERIMENT = """\
name: rs3-primary-kill
target: {platform: sandbox, topology: rs3}
faults:
  - {at: 5s, kind: host-kill, select: primary, duration: 30s}
"""


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`rsdrill run` with the runner replaced by one that returns a canned result at once."""
    monkeypatch.setattr(
        "rsdrill.engine.runner.run_experiment", lambda experiment, options: make_result(0, 11.1)
    )
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    return path


def test_run_records_into_the_history(fake_run: Path, tmp_path: Path, db: Path) -> None:
    out = tmp_path / "out"
    code, _, _ = invoke("run", str(fake_run), "--out", str(out), "--no-live", "--history", str(db))
    assert code == 0
    [run] = store.history(db)
    assert (run.experiment, run.out_dir, run.metrics["write_unavailable_s"]) == (
        "rs3-primary-kill", out.resolve(), 11.1,
    )  # fmt: skip


def test_a_sqlite_url_names_the_file(fake_run: Path, tmp_path: Path, db: Path) -> None:
    """`--history sqlite:////abs/path` (as SQLAlchemy spells a URL) is that file."""
    url = f"sqlite:///{db}"  # db is absolute: four slashes in all
    code, _, _ = invoke("run", str(fake_run), "--out", str(tmp_path / "out"), "--no-live",
                        "--history", url)  # fmt: skip
    assert code == 0 and [r.experiment for r in store.history(db)] == ["rs3-primary-kill"]
    code, out, _ = invoke("history", "--db", url)
    assert code == 0 and out.startswith("rs3-primary-kill: 1 run")
    assert not Path("sqlite:").exists()


def test_run_no_history_records_nothing(fake_run: Path, tmp_path: Path, db: Path) -> None:
    args = ("run", str(fake_run), "--out", str(tmp_path / "out"), "--no-live")
    assert invoke(*args, "--history", str(db), "--no-history")[0] == 0
    assert not db.exists()


def test_run_default_history_is_under_rsdrill_results(
    fake_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert invoke("run", str(fake_run), "--out", "out", "--no-live")[0] == 0
    assert len(store.history(tmp_path / "rsdrill-results" / "history.sqlite")) == 1


def test_a_history_that_cannot_be_written_does_not_change_the_exit_code(
    fake_run: Path, tmp_path: Path
) -> None:
    # Writable as a path (one that is not is refused before the run: test_cli_output_paths),
    # but not a SQLite database: found only when the run is recorded.
    (tmp_path / "garbage.sqlite").write_text("not a database\n")
    code, _, err = invoke("run", str(fake_run), "--out", str(tmp_path / "out"), "--no-live",
                          "--history", str(tmp_path / "garbage.sqlite"))  # fmt: skip
    assert code == 0
    assert "history: not recorded:" in err


def test_a_history_path_that_cannot_be_written_is_refused_before_the_run(
    fake_run: Path, tmp_path: Path
) -> None:
    (tmp_path / "dir.sqlite").mkdir()
    code, _, err = invoke("run", str(fake_run), "--out", str(tmp_path / "out"), "--no-live",
                          "--history", str(tmp_path / "dir.sqlite"))  # fmt: skip
    assert code == 2
    assert err == f"--history {tmp_path / 'dir.sqlite'}: {tmp_path / 'dir.sqlite'} is a directory\n"
    assert not (tmp_path / "out").exists()
