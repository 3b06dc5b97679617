"""`rsdrill run` of the catalog's bridge partition (flapping) on the sandbox: the run passes
its SLOs (no acknowledged write lost, every member back), its fault says which members were
cut, and no rule is left behind."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rsdrill.platforms.machine.network import rsdrill_tables
from tests.e2e.catalog import catalog, result_of, run_cli

INSTALL = Path(__file__).resolve().parents[2] / ".ci" / "install-netfilter"


@pytest.fixture(autouse=True)
def nft() -> None:
    if shutil.which("nft") is None:
        subprocess.run([str(INSTALL)], check=True, timeout=300)
    assert shutil.which("nft"), f"{INSTALL} did not install nft"


@pytest.mark.slow
def test_flapping_bridge_partition_run_passes_and_leaves_nothing(tmp_path: Path) -> None:
    document = catalog("bridge-partition", fault_s="6s")
    document["faults"][0]["flapping"] = "2s"  # cut, healed, cut within the 6 s
    code, output, out = run_cli(tmp_path, document)
    assert code == 0, output
    result = result_of(out)
    fault = result["faults"][0]
    plan = fault["detail"]["plan"]
    assert plan.startswith(f"partition shape bridge around {fault['target']}: cut "), plan
    assert "cut and healed every 2s" in plan
    assert fault["detail"]["role"] == "SECONDARY"
    assert result["metrics"]["lost_acknowledged_writes"] == 0
    assert not [t for t in rsdrill_tables() if t.split("-")[1] in plan], rsdrill_tables()
