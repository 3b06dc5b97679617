"""What a `rsdrill` command costs beside its work, in fresh processes on this machine: the CPU
of `rsdrill validate` (imports, the models, the exit), and for a sandbox run
(experiments/rs3-stepdown.yaml) its CPU, how long its analysis phase took and how long its
process lived after its last line.

CPU is user + system of the command and of the children it waited for (a run's sandbox
members are not among them: they outlive their zygote's wait). Rounds alternate the commands;
medians, min and max are printed.

Usage: python bench/cli_cost.py [--rounds 9] [--runs 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VALIDATE = [sys.executable, "-m", "rsdrill.cli", "validate", "experiments/rs3-stepdown.yaml"]


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def validate_cpu_s() -> float:
    before = children_cpu_s()
    subprocess.run(VALIDATE, cwd=REPO, check=True, capture_output=True)
    return children_cpu_s() - before


def sandbox_run(out: Path) -> tuple[float, float, float]:
    """(CPU s, analysis phase s, s from the last line to the exit) of one run."""
    argv = [sys.executable, "-m", "rsdrill.cli", "run", "experiments/rs3-stepdown.yaml",
            "--out", str(out), "--no-live", "--no-history"]  # fmt: skip
    before = children_cpu_s()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    marks: dict[str, float] = {}
    last = time.monotonic()
    for line in proc.stdout:
        last = time.monotonic()
        for phase in ("analyze", "audit"):
            if f"phase: {phase}" in line:
                marks[phase] = last
    if proc.wait() != 0:
        raise RuntimeError(f"rsdrill run exited {proc.returncode}")
    lag = time.monotonic() - last
    return children_cpu_s() - before, marks["audit"] - marks["analyze"], lag


def summary(label: str, values: list[float]) -> str:
    return (f"{label:<34} median {statistics.median(values):6.3f}  min {min(values):6.3f}  "
            f"max {max(values):6.3f}  (n={len(values)})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="validate commands")
    parser.add_argument("--runs", type=int, default=3, help="sandbox runs")
    args = parser.parse_args()
    subprocess.run(VALIDATE, cwd=REPO, check=True, capture_output=True)  # warm-up
    validate = [validate_cpu_s() for _ in range(args.rounds)]
    runs = []
    with tempfile.TemporaryDirectory(prefix="rsdrill-cli-cost-") as scratch:
        for i in range(args.runs):
            runs.append(sandbox_run(Path(scratch) / f"out-{i}"))
    print(summary("validate: CPU s", validate))
    print(summary("run (rs3-stepdown): CPU s", [r[0] for r in runs]))
    print(summary("run: analysis phase s", [r[1] for r in runs]))
    print(summary("run: last line to exit s", [r[2] for r in runs]))


if __name__ == "__main__":
    main()
