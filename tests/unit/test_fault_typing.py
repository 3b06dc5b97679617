"""A kind's own field read on a fault of another kind is a type error: every kind's model is a
real class that mypy and the runtime share (rsdrill/faults/), and `Fault` is their union, so a
read compiles only after narrowing. Run through mypy's own API with the project's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]

WRONG = """
from rsdrill.faults import Fault, StepdownFault

def restarts(fault: Fault) -> bool:
    return fault.restart is not False  # any fault: not narrowed

def latency(fault: StepdownFault) -> float | None:
    return fault.latency  # a stepdown has no latency

def after_narrowing_to_another(fault: Fault) -> float:
    if fault.kind == "cpu-starve":
        return fault.fill_percent  # disk-fill's, not cpu-starve's
    return 0.0
"""

RIGHT = """
from rsdrill.faults import Fault, HostKillFault

def restarts(fault: Fault) -> bool:
    if fault.kind == "host-kill":
        return fault.restart is not False
    return False

def wiped(fault: HostKillFault) -> bool:
    return fault.wiped_on_restart

def share(fault: Fault) -> float:
    return fault.cpu_share if fault.kind == "cpu-starve" else 1.0
"""


@pytest.mark.timeout(240)
def test_a_field_of_another_kind_type_checks_only_after_narrowing(tmp_path: Path) -> None:
    (tmp_path / "wrong.py").write_text(WRONG)
    (tmp_path / "right.py").write_text(RIGHT)
    out, err, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
         str(tmp_path / "wrong.py"), str(tmp_path / "right.py")]
    )  # fmt: skip
    report = out + err
    assert status == 1, report
    errors = [line for line in report.splitlines() if ": error:" in line]
    assert any("wrong.py:5: error:" in e and '"restart"' in e for e in errors), report
    assert any("wrong.py:8: error:" in e and '"StepdownFault" has no attribute "latency"' in e
               for e in errors), report  # fmt: skip
    assert any("wrong.py:12: error:" in e and '"fill_percent"' in e for e in errors), report
    # The same reads after narrowing are fine.
    assert not [e for e in errors if "right.py" in e], report
