"""Matrix experiments: expansion into variants, invalid parameters, the results table."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsdrill.engine.sweep import Cell, exit_code, render_table
from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.schema import MatrixTable, MatrixValue, set_path
from rsdrill.result import Metrics, Result, TargetInfo

BASE = """
name: sweep
target: {platform: sandbox, topology: rs3, data_mb: 10}
faults:
  - {at: 3s, kind: host-kill, select: secondary, restart: {after: 2s}}
matrix:
  parameters:
    target.data_mb: [10, 40]
    faults.0.restart.volume: [keep, wipe]
  table: {rows: target.data_mb, columns: faults.0.restart.volume, metric: recovery_s.max}
"""


def test_variants_cover_every_combination_in_order() -> None:
    exp = load_experiment_text(BASE, "sweep.yaml", env={})
    got = [(p, v.target.data_mb, v.faults[0].restart.volume) for p, v in exp.variants()]
    assert [(d, vol) for _, d, vol in got] == [(10, "keep"), (10, "wipe"), (40, "keep"),
                                               (40, "wipe")]  # fmt: skip
    assert all(v.matrix is None for _, v in exp.variants())
    assert got[1][0] == {"target.data_mb": 10, "faults.0.restart.volume": "wipe"}
    assert exp.variants()[0][1].faults[0].restart.after == 2.0  # the rest is kept


def test_a_value_that_breaks_the_experiment_is_an_error_at_its_line() -> None:
    bad = BASE.replace("[keep, wipe]", "[keep, wiped]")
    with pytest.raises(ExperimentError) as err:
        load_experiment_text(bad, "sweep.yaml", env={})
    assert err.value.line == 9 and "wiped" in str(err.value)


def test_a_value_is_refused_in_words_naming_the_field_it_breaks() -> None:
    bad = BASE.replace("[10, 40]", "[10, -4]")
    with pytest.raises(ExperimentError) as err:
        load_experiment_text(bad, "sweep.yaml", env={})
    assert err.value.problem == ("value -4 does not make a valid experiment: target.data_mb: "
                                 "Input should be greater than or equal to 0")  # fmt: skip


def test_a_problem_of_the_file_itself_is_not_blamed_on_the_matrix() -> None:
    # Every variant inherits it: it was reported as the first matrix value's, with pydantic's
    # "Value error, " in the message.
    bad = BASE.replace("restart: {after: 2s}}", "restart: {after: 2s}}\nslo: {failover_s: <= 9}")
    bad = bad.replace("name: sweep", "name: sweep\nprobes: {failover: null}")
    with pytest.raises(ExperimentError) as err:
        load_experiment_text(bad, "sweep.yaml", env={})
    assert err.value.field == "slo.failover_s"
    assert "Value error" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("rows: target.size_mb", "not one of the parameters"),
        ("metric: recovery_seconds", "unknown metric"),
    ],
)
def test_table_must_name_parameters_and_a_metric(text: str, needle: str) -> None:
    key = text.split(":")[0]
    original = {"rows": "rows: target.data_mb", "metric": "metric: recovery_s.max"}[key]
    with pytest.raises(ExperimentError, match=needle):
        load_experiment_text(BASE.replace(original, text), "sweep.yaml", env={})


def test_set_path_into_lists_and_missing_mappings() -> None:
    doc: dict = {"faults": [{"kind": "host-kill"}]}
    set_path(doc, "faults.0.restart.volume", "wipe")
    set_path(doc, "target.data_mb", 5)
    assert doc == {"faults": [{"kind": "host-kill", "restart": {"volume": "wipe"}}],
                   "target": {"data_mb": 5}}  # fmt: skip
    with pytest.raises(ValueError, match="no item 3"):
        set_path(doc, "faults.3.kind", "stepdown")


def _cell(data: int, volume: str, recovery: float | None, verdict: str = "pass") -> Cell:
    result = Result(
        experiment="sweep", verdict=verdict, exit_code=0, started_at="", duration_s=1,
        target=TargetInfo(platform="sandbox", topology="rs3", uri=""),
        metrics=Metrics(recovery_s={"h:1": recovery}),
    )  # fmt: skip
    return Cell({"target.data_mb": data, "faults.0.restart.volume": volume}, result, Path("x"))


def test_table_pivots_rows_and_columns() -> None:
    cells = [_cell(10, "keep", 0.5), _cell(10, "wipe", 1.25), _cell(40, "keep", 0.6),
             _cell(40, "wipe", 75.5)]  # fmt: skip
    table = MatrixTable(rows="target.data_mb", columns="faults.0.restart.volume",
                        metric="recovery_s.max")  # fmt: skip
    assert render_table(cells, table).splitlines() == [
        "| target.data_mb | faults.0.restart.volume=keep | faults.0.restart.volume=wipe |",
        "|---|---|---|",
        "| 10 | 0.50 s | 1.25 s |",
        "| 40 | 0.60 s | 1:15.50 |",
    ]
    assert exit_code(cells) == 0
    assert exit_code([*cells, _cell(80, "keep", None, verdict="fail")]) == 1
    assert exit_code([*cells, _cell(80, "keep", None, verdict="error")]) == 4


def _measured(parameter: str, value: MatrixValue, **metrics: object) -> Cell:
    """A passed run of `parameter=value` that measured `metrics`."""
    result = Result(
        experiment="sweep", verdict="pass", exit_code=0, started_at="", duration_s=1,
        target=TargetInfo(platform="sandbox", topology="rs3", uri=""),
        metrics=Metrics.model_validate(metrics),
    )  # fmt: skip
    return Cell({parameter: value}, result, Path("x"))


def test_cells_carry_the_metrics_own_unit() -> None:
    def with_metrics(data: int, **metrics: object) -> Cell:
        return _measured("target.data_mb", data, **metrics)

    lost = MatrixTable(rows="target.data_mb", metric="lost_acknowledged_writes")
    cells = [with_metrics(1, lost_acknowledged_writes=6), with_metrics(2)]
    assert render_table(cells, lost).splitlines()[2:] == ["| 1 | 6 |", "| 2 | - |"]
    p99 = MatrixTable(rows="target.data_mb", metric="latency_ms.p99")
    cells = [with_metrics(1, latency_ms={"p99": 1881.04})]
    assert render_table(cells, p99).splitlines()[2:] == ["| 1 | 1881.0 ms |"]


def test_a_table_of_several_metrics_has_a_column_each() -> None:
    def with_metrics(w: MatrixValue, **metrics: object) -> Cell:
        return _measured("probes.availability.write_concern", w, **metrics)

    table = MatrixTable(rows="probes.availability.write_concern",
                        metrics=("lost_acknowledged_writes", "write_unavailable_s"))  # fmt: skip
    cells = [
        with_metrics(1, lost_acknowledged_writes=12, write_unavailable_s=1.5),
        with_metrics("majority", lost_acknowledged_writes=0, write_unavailable_s=2.25),
    ]
    assert render_table(cells, table).splitlines() == [
        "| probes.availability.write_concern | lost_acknowledged_writes | write_unavailable_s |",
        "|---|---|---|",
        "| 1 | 12 | 1.50 s |",
        "| majority | 0 | 2.25 s |",
    ]


def test_several_metrics_under_each_value_of_the_columns() -> None:
    """Write concern down, read preference across: RPO, write and read outage under each."""

    def cell(w: MatrixValue, read: str, lost: int, write_s: float, read_s: float) -> Cell:
        measured = _measured("w", w, lost_acknowledged_writes=lost, write_unavailable_s=write_s,
                             read_unavailable_s=read_s)  # fmt: skip
        return Cell({"w": w, "read": read}, measured.result, measured.out_dir)

    table = MatrixTable(rows="w", columns="read",
                        metrics=("lost_acknowledged_writes", "read_unavailable_s"))  # fmt: skip
    cells = [cell(1, "primary", 3, 1.0, 1.25), cell(1, "nearest", 2, 1.0, 0.02),
             cell("majority", "primary", 0, 2.0, 2.5),
             cell("majority", "nearest", 0, 2.0, 0.03)]  # fmt: skip
    assert render_table(cells, table).splitlines() == [
        "| w | read=primary lost_acknowledged_writes | read=primary read_unavailable_s | "
        "read=nearest lost_acknowledged_writes | read=nearest read_unavailable_s |",
        "|---|---|---|---|---|",
        "| 1 | 3 | 1.25 s | 2 | 0.02 s |",
        "| majority | 0 | 2.50 s | 0 | 0.03 s |",
    ]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({}, r"give either metric \(one per cell\) or metrics \(a column each\)"),
        ({"metric": "failover_s", "metrics": ("failover_s",)}, "give either metric"),
    ],
)
def test_a_table_names_its_metrics_one_way(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        MatrixTable.model_validate({"rows": "a", **fields})
