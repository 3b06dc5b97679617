"""The shipped disaster-recovery drill (experiments/rs3-disaster-recovery-drill.yaml, default
election settings) run N times: the figures README's "Disaster-recovery drills" section quotes.

Each run: backup at 5 s, every member's data lost at 15 s, the restore step at 17 s. Prints per
run rto_s (data loss → first successful write), restore_s (the restore step's run time), the
rest of the RTO (restore end → first write: the election), rpo_s, the acknowledged writes lost
after the backup (lost_acknowledged_writes) and before it (lost_before_backup, must be 0); then
the medians and ranges.

Usage: python bench/disaster_recovery.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.loader import load_experiment

DRILL = Path(__file__).resolve().parents[1] / "experiments" / "rs3-disaster-recovery-drill.yaml"


@dataclass(frozen=True)
class Drill:
    rto_s: float
    restore_s: float
    rpo_s: float
    lost_after_backup: int
    lost_before_backup: int

    @property
    def election_s(self) -> float:
        return self.rto_s - self.restore_s


def drill(out_dir: Path) -> Drill:
    result = run_experiment(
        load_experiment(DRILL), RunOptions(out_dir=out_dir, live=False, journal_dir=out_dir)
    )
    if result.verdict != "pass":
        raise RuntimeError(f"drill {out_dir} ended {result.verdict}: {result.error}")
    m = result.metrics
    figures = (m.rto_s, m.restore_s, m.rpo_s, m.lost_acknowledged_writes, m.lost_before_backup)
    if any(f is None for f in figures):
        raise RuntimeError(f"drill {out_dir}: a figure is missing: {m}")
    assert m.rto_s is not None and m.restore_s is not None and m.rpo_s is not None
    assert m.lost_acknowledged_writes is not None and m.lost_before_backup is not None
    return Drill(m.rto_s, m.restore_s, m.rpo_s, m.lost_acknowledged_writes, m.lost_before_backup)


def _spread(values: list[float], unit: str = " s", digits: int = 2) -> str:
    return (f"median {statistics.median(values):.{digits}f}{unit} "
            f"({min(values):.{digits}f}–{max(values):.{digits}f})")  # fmt: skip  # noqa: RUF001


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    drills = []
    with tempfile.TemporaryDirectory(prefix="rsdrill-bench-dr-") as tmp:
        for i in range(args.runs):
            d = drill(Path(tmp) / f"run-{i}")
            drills.append(d)
            print(f"run {i + 1}: rto {d.rto_s:.2f} s = restore {d.restore_s:.2f} s + election "
                  f"{d.election_s:.2f} s; rpo {d.rpo_s:.2f} s; lost after the backup "
                  f"{d.lost_after_backup}, before it {d.lost_before_backup}",
                  flush=True)  # fmt: skip
    print(f"rto_s {_spread([d.rto_s for d in drills])}")
    print(f"restore_s {_spread([d.restore_s for d in drills])}")
    print(f"election (rto - restore) {_spread([d.election_s for d in drills])}")
    print(f"rpo_s {_spread([d.rpo_s for d in drills])}")
    lost = [float(d.lost_after_backup) for d in drills]
    print(f"acknowledged writes lost after the backup {_spread(lost, '', digits=0)}")
    before = sum(d.lost_before_backup for d in drills)
    print(f"lost before the backup: {before} in all ({'PASS' if before == 0 else 'FAIL'})")


if __name__ == "__main__":
    main()
