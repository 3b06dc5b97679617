"""rsdrill as a library: the typed functions and names `rsdrill/__init__.py` exports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import rsdrill
from rsdrill.experiment.loader import ExperimentError
from rsdrill.result import Result

EXPERIMENT = """\
name: api-kill
target: {platform: sandbox, topology: rs3}
faults:
  - {at: 5s, kind: host-kill, duration: 20s}
slo:
  write_unavailable_s: "<= 15"
"""


def test_load_and_plan(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    experiment = rsdrill.load(path)
    assert isinstance(experiment, rsdrill.Experiment)
    assert experiment.faults[0].kind == "host-kill"
    assert "host-kill" in rsdrill.plan(experiment)


def test_an_invalid_file_is_an_experiment_error_and_an_rsdrill_error(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.replace("host-kill", "host-kil"))
    with pytest.raises(rsdrill.ExperimentError) as info:
        rsdrill.load(path)
    assert isinstance(info.value, rsdrill.RsdrillError)
    assert str(info.value).startswith(f"{path}:4:")


def test_the_exported_names_are_the_modules_own() -> None:
    assert rsdrill.Result is Result and rsdrill.ExperimentError is ExperimentError
    for error in (rsdrill.TargetError, rsdrill.InjectionError, rsdrill.GuardRefusal):
        assert issubclass(error, rsdrill.RsdrillError)
    assert set(rsdrill.__all__) <= set(dir(rsdrill)) | {"Check", "Experiment",
                                                        "ExperimentError", "Result"}  # fmt: skip
    with pytest.raises(AttributeError):
        _ = rsdrill.NoSuchThing  # type: ignore[attr-defined]
    assert (Path(rsdrill.__file__).parent / "py.typed").is_file()


def test_importing_the_package_imports_no_pydantic() -> None:
    probe = "import sys, rsdrill; print(sorted(m for m in sys.modules if m.startswith('pydantic')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
