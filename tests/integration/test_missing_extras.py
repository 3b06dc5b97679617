"""Each optional extra a command needs, absent: one line naming the `pip install` to run, exit
2, no traceback, nothing run. Each case runs the real command line in a fresh interpreter in
which the extra's modules cannot be imported, as where the extra was never installed."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import build_topology

REPO = Path(__file__).resolve().parents[2]
EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]

_WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None  # `import name` fails as where it is not installed\n"
    "sys.argv = ['rsdrill', *sys.argv[2:]]\n"
    "from rsdrill.cli.entry import main\n"
    "main()\n"
)


def without(modules: str, *args: str, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT, modules, *args], capture_output=True, text=True,
        timeout=120, env=env, cwd=cwd,
    )  # fmt: skip


def assert_says_install(done: subprocess.CompletedProcess[str], extra: str) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output, output
    said = [line for line in output.splitlines() if f"pip install 'rsdrill[{extra}]'" in line]
    assert len(said) == 1, output
    assert extra in EXTRAS, f"the message names an extra pyproject.toml does not have: {extra}"


@pytest.fixture(scope="module")
def running_set(tmp_path_factory: pytest.TempPathFactory,
                free_port_base: Callable[[int], int]) -> Iterator[Sandbox]:  # fmt: skip
    """A replica set whose members answer, so that each platform's check gets to its SDK."""
    directory = tmp_path_factory.mktemp("set")
    sandbox = up(directory, build_topology("rs3", port_base=free_port_base(3)), EmulatorEngine())
    try:
        yield sandbox
    finally:
        sandbox.down(grace_s=2.0)


# The catalog experiment of each platform reached by URI, the variables it reads, the modules
# its extra brings, and the extra.
PLATFORMS = [
    ("ec2-rs3-stop-primary.yaml", "RSDRILL_EC2_URI", "boto3,botocore", "ec2"),
    ("vsphere-rs3-host-failure.yaml", "RSDRILL_URI", "pyVmomi,pyVim", "vsphere"),
    ("k8s-rs3-pod-kill.yaml", None, "kubernetes", "kubernetes"),
]


@pytest.mark.parametrize(("name", "uri_variable", "modules", "extra"), PLATFORMS)
@pytest.mark.parametrize("command", ["check", "run"])
def test_a_platform_without_its_sdk_says_which_extra(
    tmp_path: Path, running_set: Sandbox, command: str, name: str, uri_variable: str | None,
    modules: str, extra: str,
) -> None:  # fmt: skip
    document = yaml.safe_load((REPO / "experiments" / name).read_text())
    document["target"]["uri"] = running_set.uri
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "VSPHERE_HOST": "127.0.0.1",
           "VSPHERE_USER": "u", "VSPHERE_PASSWORD": "p", "AWS_ACCESS_KEY_ID": "k",
           "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
    if uri_variable is not None:
        env[uri_variable] = running_set.uri
    extra_args = ["--yes", "--out", str(tmp_path / "out")] if command == "run" else []
    done = without(modules, command, str(path), *extra_args, env=env, cwd=tmp_path)
    assert_says_install(done, extra)
    assert not (tmp_path / "out" / "result.json").exists()


def test_history_as_openmetrics_without_prometheus_client(tmp_path: Path) -> None:
    done = without("prometheus_client", "history", "--format", "openmetrics", cwd=tmp_path)
    assert_says_install(done, "metrics")


def test_a_run_asked_for_metrics_without_prometheus_client_runs_nothing(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text("name: m\ntarget: {platform: sandbox}\nfaults: [{at: 1s, kind: stepdown}]\n")
    metrics, out = str(tmp_path / "m.prom"), str(tmp_path / "out")
    done = without("prometheus_client", "run", str(path), "--metrics-file", metrics, "--out", out,
                   cwd=tmp_path)  # fmt: skip
    assert_says_install(done, "metrics")
    assert not (tmp_path / "out").exists()
