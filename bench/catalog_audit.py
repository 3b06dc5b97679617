"""The data audit after every sandbox experiment of the catalog: each run compressed as the
e2e tests run them (faults at 3 s held for 4 s, 1 s elections, 10 s of observation), then the
audit's verdict: consistent or not, collections validated, oplog entries compared, rollbacks.

Usage: python bench/catalog_audit.py [--only NAME ...] [--out bench/results/catalog-audit.txt]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rsdrill.engine.options import RunOptions  # noqa: E402
from rsdrill.engine.runner import run_experiment  # noqa: E402
from rsdrill.experiment.schema import Experiment  # noqa: E402
from tests.e2e.catalog import catalog  # noqa: E402


def sandbox_catalog() -> list[str]:
    """The catalog's sandbox experiments with a fixed schedule (no matrix, no soak)."""
    import yaml

    names = []
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        target = document["target"]
        if (target.get("platform", "sandbox") == "sandbox" and isinstance(document["faults"], list)
                and not document.get("matrix")):  # fmt: skip
            names.append(path.stem)
    return names


def _compressed(name: str) -> Experiment:
    """As the e2e tests compress it; a fault that cannot be held for 4 s (a flapping partition
    needs two intervals) is held for 12 s; one with steps on its timeline (a disaster-recovery
    drill: backup, loss, restore) runs as written."""
    import yaml

    document = yaml.safe_load((ROOT / "experiments" / f"{name}.yaml").read_text())
    if document.get("steps"):
        return Experiment.model_validate(document)
    try:
        return Experiment.model_validate(catalog(name))
    except ValueError:
        return Experiment.model_validate(catalog(name, fault_s="12s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines = [f"{'experiment':34} {'verdict':7} {'audit':12} {'valid':>5} {'oplog':>5} "
             f"{'lag s':>6} {'rolled back':>11} {'run s':>6}"]  # fmt: skip
    print(lines[0], flush=True)
    verdicts: list[str] = []
    for name in args.only or sandbox_catalog():
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            result = run_experiment(_compressed(name), RunOptions(
                out_dir=Path(tmp) / "out", live=False, journal_dir=Path(tmp)))  # fmt: skip
        audit, m = result.audit, result.metrics
        if audit is None:
            verdict = "not run"
        elif audit.error:
            verdict = "error"
        else:
            verdict = "consistent" if audit.consistent else "DIVERGENT"
        verdicts.append(verdict)
        rolled = "n/a" if m.rolled_back_writes is None else str(m.rolled_back_writes)
        validated = audit.validated if audit and audit.validated is not None else "-"
        compared = audit.oplog_compared if audit and audit.oplog_compared is not None else "-"
        lag = audit.lag_s if audit and audit.lag_s is not None else float("nan")
        line = (f"{name:34} {result.verdict:7} {verdict:12} {validated!s:>5} {compared!s:>5} "
                f"{lag:6.2f} {rolled:>11} {time.monotonic() - started:6.1f}")  # fmt: skip
        if audit is not None and audit.error:
            line += f"  ({audit.error})"
        elif result.error:
            line += f"  (run: {result.error})"
        print(line, flush=True)
        lines.append(line)
    # An audit error (one data-bearing member: nothing to compare) is no verdict of consistency.
    summary = (f"\n{len(verdicts)} experiments: {verdicts.count('consistent')} consistent, "
               f"{verdicts.count('DIVERGENT')} divergent, {verdicts.count('error')} not compared "
               f"(audit error), {verdicts.count('not run')} not audited")  # fmt: skip
    print(summary)
    if args.out:
        args.out.write_text("\n".join(lines) + summary + "\n")


if __name__ == "__main__":
    main()
