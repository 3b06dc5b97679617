"""A matrix experiment: one run per combination of parameter values, and the table of a metric
across them (e.g. recovery time by data size, kept volume against initial sync)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import Runner
from rsdrill.experiment.schema import Experiment, MatrixTable, MatrixValue
from rsdrill.result import EXIT_CODES, Result

# When runs disagree, the sweep exits with the most serious of their codes.
_SEVERITY = ["pass", "fail", "aborted", "error"]


@dataclass
class Cell:
    parameters: dict[str, MatrixValue]
    result: Result
    out_dir: Path


def _slug(parameters: dict[str, MatrixValue]) -> str:
    text = "-".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in parameters.items())
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)


def run_sweep(experiment: Experiment, options: RunOptions) -> list[Cell]:
    """Run every variant into its own directory under the output directory, in order, until
    one is stopped by SIGINT or SIGTERM: a CI's timeout went on to break the set with the next
    variants until its SIGKILL came, in the middle of one."""
    cells = []
    for i, (parameters, variant) in enumerate(experiment.variants(), start=1):
        out = options.out_dir / f"{i:02d}-{_slug(parameters)}"
        runner = Runner(variant, replace(options, out_dir=out))
        cells.append(Cell(parameters, runner.run(), out))
        if runner.signalled:
            break
    return cells


def worst_verdict(cells: list[Cell]) -> str:
    return max((c.result.verdict for c in cells), key=_SEVERITY.index, default="pass")


def exit_code(cells: list[Cell]) -> int:
    return EXIT_CODES[worst_verdict(cells)]


def _value(cell: Cell, metric: str) -> float | None:
    from rsdrill.analysis.slo import observed_value

    return observed_value(cell.result.metrics, metric)


def _show(value: float | None, metric: str) -> str:
    """A cell: seconds as `12.34 s` or `m:ss.ss`, milliseconds as `ms`, counts as numbers."""
    if value is None:
        return "never" if _unit(metric) == "s" else "-"
    if _unit(metric) == "ms":
        return f"{value:.1f} ms"
    if _unit(metric) != "s":
        return f"{value:g}"
    minutes, seconds = divmod(value, 60)
    return f"{value:.2f} s" if value < 60 else f"{int(minutes)}:{seconds:05.2f}"


def _unit(metric: str) -> str:
    name = metric.split(".", 1)[0]
    if name.endswith("_ms"):
        return "ms"
    return "s" if name.endswith("_s") else ""


def render_table(cells: list[Cell], table: MatrixTable) -> str:
    """A Markdown table: `rows` down; across, each value of `columns` (with several metrics,
    each metric under each value), or each of `metrics`."""
    rows = list(dict.fromkeys(c.parameters[table.rows] for c in cells))
    across: list[tuple[MatrixValue | None, str]]
    if table.columns is not None:
        column_values = dict.fromkeys(c.parameters[table.columns] for c in cells)
        across = [(v, metric) for v in column_values for metric in table.shown]
        several = len(table.shown) > 1
        header = [table.rows] + [f"{table.columns}={v}" + (f" {m}" if several else "")
                                 for v, m in across]  # fmt: skip
    else:
        across = [(None, metric) for metric in table.shown]
        header = [table.rows, *table.shown]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        values = []
        for column, metric in across:
            matching = [
                c
                for c in cells
                if c.parameters[table.rows] == row
                and (table.columns is None or c.parameters[table.columns] == column)
            ]
            values.append(", ".join(_show(_value(c, metric), metric) for c in matching) or "-")
        lines.append(f"| {row} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def write_summary(cells: list[Cell], table: MatrixTable | None, out_dir: Path) -> str:
    """matrix.md and matrix.json in the sweep's directory; returns the Markdown."""
    lines = ["| run | parameters | verdict |", "|---|---|---|"]
    for c in cells:
        params = ", ".join(f"{k}={v}" for k, v in c.parameters.items())
        lines.append(f"| {c.out_dir.name} | {params} | {c.result.verdict} |")
    text = "\n".join(lines)
    if table is not None:
        text = f"{render_table(cells, table)}\n\n({', '.join(table.shown)})\n\n{text}"
    (out_dir / "matrix.md").write_text(text + "\n")
    (out_dir / "matrix.json").write_text(json.dumps([
        {"run": c.out_dir.name, "parameters": c.parameters, "verdict": c.result.verdict,
         "metrics": c.result.metrics.model_dump(exclude={"member_states"})}
        for c in cells
    ], indent=2))  # fmt: skip
    return text
