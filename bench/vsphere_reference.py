"""The vSAN reference architecture's host power-off table, repeated with the catalog's vSphere
experiments and printed beside the published figures.

Each run starts vcsim (govmomi's vCenter simulator, built by .ci/install-vcsim) with one
cluster of four ESXi hosts, a sandbox replica set (rs1, or primary-secondary-arbiter as in the
reference) with MongoDB's default election timeout, and one VM per member on its own ESXi host,
bound to the member by the test harness (tests/harness/vsphere_binding.py: a powered-off VM
SIGKILLs its member, a powered-on one restarts it). `rsdrill run` then carries out
experiments/vsphere-rs1-host-failure.yaml and experiments/vsphere-rs3-host-failure.yaml through
vCenter's API: the primary's ESXi host fails (every VM on it powered off) and its VM is powered
on again on another host `restart.after` later, standing in for vSphere HA.

Usage: python bench/vsphere_reference.py [--runs 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness.vcsim import vcsim
from harness.vsphere_reference import HarnessRun, run_catalog, side_by_side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each experiment")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsdrill-vsphere-") as tmp:
        work = Path(tmp)
        runs: dict[str, list[HarnessRun]] = {"rs1": [], "psa": []}
        with vcsim(work / "vcsim.log") as sim:
            for i in range(args.runs):
                for topology in runs:
                    run = run_catalog(topology, sim, work / f"{topology}-{i}")
                    if run.exit_code != 0 or run.binding_errors:
                        sys.exit(f"{topology} run {i} failed ({run.exit_code}): {run.output}"
                                 f"{run.binding_errors}")  # fmt: skip
                    runs[topology].append(run)
                    metrics = run.result["metrics"]
                    failover = metrics["failover_s"]
                    print(f"{topology} run {i + 1}: write_unavailable_s "
                          f"{metrics['write_unavailable_s']:.2f}, failover_s "
                          f"{'-' if failover is None else f'{failover:.2f}'}, elections vetoed "
                          f"{run.vetoed_elections}, member back "
                          f"{run.member_restart_s or 0:.2f} s after its kill",
                          flush=True)  # fmt: skip
    print()
    print(side_by_side(runs["rs1"] + runs["psa"]))


if __name__ == "__main__":
    main()
