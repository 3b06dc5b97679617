"""A third-party platform, installed as a package with an `rsdrill.platforms` entry point, is
a platform like the built-ins: its section is validated, its checks run, `rsdrill plan` shows
what it would do, its ways are its column of the fault tables and decide which kinds load."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rsdrill.registry import GROUP, built_in
from tests.harness.cli import rsdrill_run

ROOT = Path(__file__).resolve().parents[2]

# The toy platform of docs/architecture.md, as the page shows it.
TOY_PACKAGE = re.search(
    r"```python\n((?:(?!```).)*class ToyPlatform(?:(?!```).)*)```",
    (ROOT / "docs" / "architecture.md").read_text(),
    re.S,
).group(1)

EXPERIMENT = """\
name: toy-kill
target:
  platform: toy
  uri: mongodb://toy-0:27017/?replicaSet=rs0
  toy: {cluster: blue}
faults:
  - at: 5s
    kind: host-kill
    duration: 20s
    toy: {gentle: true}
"""


@pytest.fixture
def toy_site(tmp_path: Path) -> Path:
    """A directory on sys.path holding the toy package and its dist-info (as pip leaves it)."""
    site = tmp_path / "site"
    (site / "toyplatform").mkdir(parents=True)
    (site / "toyplatform" / "__init__.py").write_text(TOY_PACKAGE)
    info = site / "toyplatform-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplatform\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\ntoy = toyplatform:platform\n")
    return site


def _env(site: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def rsdrill(site: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return rsdrill_run(
        [*map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(site),
    )


def test_a_platform_from_an_entry_point_is_planned(toy_site: Path, tmp_path: Path) -> None:
    path = tmp_path / "toy.yaml"
    path.write_text(EXPERIMENT)
    result = rsdrill(toy_site, "plan", path)
    assert result.returncode == 0, result.stderr
    assert "toy resources" in result.stdout
    assert "power-cycle a machine of cluster blue" in result.stdout


def test_its_sections_and_checks_are_enforced_at_load(toy_site: Path, tmp_path: Path) -> None:
    path = tmp_path / "toy.yaml"
    path.write_text(EXPERIMENT.replace("cluster: blue", "clustr: blue"))
    result = rsdrill(toy_site, "validate", path)
    assert result.returncode == 2
    assert f"{path}:5:9: target.toy.clustr: unknown key; did you mean 'cluster'?" in result.stderr
    path.write_text(EXPERIMENT.replace("kind: host-kill", "kind: host-freeze"))
    result = rsdrill(toy_site, "validate", path)
    assert result.returncode == 2
    assert "faults[0].kind: toy machines can only be power-cycled" in result.stderr


def test_a_kind_it_has_no_injector_or_no_way_for_is_refused_at_its_line(
    toy_site: Path, tmp_path: Path
) -> None:
    """network-partition: no injector; volume-detach: an injector but no way."""
    path = tmp_path / "toy.yaml"
    for kind in ("network-partition", "volume-detach"):
        path.write_text(EXPERIMENT.replace("kind: host-kill", f"kind: {kind}"))
        result = rsdrill(toy_site, "validate", path)
        assert result.returncode == 2
        assert result.stderr.strip() == (
            f"{path}:8:11: faults[0].kind: {kind} is not available on toy "
            "(it has: host-kill, stepdown, mongodb-fail-command)"
        )
    path.write_text(EXPERIMENT.replace("kind: host-kill\n    duration: 20s", "kind: stepdown"))
    assert rsdrill(toy_site, "validate", path).returncode == 0
    path.write_text(EXPERIMENT)
    assert rsdrill(toy_site, "validate", path).stdout == f"{path}: ok\n"


def test_its_ways_are_its_column_of_the_fault_tables(toy_site: Path) -> None:
    table = rsdrill(toy_site, "faults")
    assert table.returncode == 0, table.stderr
    rows = {line.split(" | ")[0]: line for line in table.stdout.splitlines()}
    assert rows["| fault"].endswith(" | vSphere | Toy machines |")
    assert rows["| `host-kill`"].endswith(" | power-cycle the toy machine |")
    assert rows["| `stepdown`"].endswith(" | replSetStepDown | replSetStepDown |")
    assert rows["| `volume-detach`"].endswith(" | refused when loaded |")
    listed = json.loads(rsdrill(toy_site, "faults", "--platform", "toy", "--json").stdout)
    kill = next(k for k in listed["kinds"] if k["kind"] == "host-kill")
    assert [w["how"] for w in kill["platforms"]["toy"]] == ["power-cycle the toy machine"]
    doc = subprocess.run([sys.executable, "-m", "rsdrill.experiment.faultdocs"],
                         capture_output=True, text=True, timeout=60,
                         env=_env(toy_site))  # fmt: skip
    assert doc.returncode == 0, doc.stderr
    toy_table = doc.stdout.split("## Toy machines\n", 1)[1]
    assert "| `host-kill` |  |  | power-cycle the toy machine | exact |  |" in toy_table
    assert "| `network-partition` | | | refused when loaded | | |" in toy_table


def test_without_the_package_the_platform_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "toy.yaml"
    path.write_text(EXPERIMENT)
    result = rsdrill(tmp_path, "validate", path)
    assert result.returncode == 2
    assert "target.platform: unknown value 'toy'" in result.stderr


def test_the_built_ins_registered_are_those_of_pyproject() -> None:
    """The installed metadata is pyproject's (else: `pip install -e .` again)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sorted(project["entry-points"][GROUP]) == sorted(built_in())


def test_a_platform_that_cannot_be_loaded_is_left_out_with_a_warning(
    toy_site: Path, tmp_path: Path
) -> None:
    (toy_site / "toyplatform" / "__init__.py").write_text("import no_such_sdk\n")
    sandbox = tmp_path / "sandbox.yaml"
    sandbox.write_text(
        "name: s\ntarget: {platform: sandbox}\nfaults:\n  - {at: 1s, kind: stepdown}\n"
    )
    result = rsdrill(toy_site, "validate", sandbox)
    assert (result.returncode, result.stdout) == (0, f"{sandbox}: ok\n"), result.stderr
    assert "platform toy (toyplatform:platform) cannot be loaded" in result.stderr
    assert "Traceback" not in result.stderr
