"""`rsdrill --help` imports no driver, platform SDK or parser: the property that keeps it fast.

Checked without timing, from `python -X importtime`; bench/cli_startup.py times it against
Chaos Toolkit's `chaos --help`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Top-level import names: the driver (and its bson), the platform SDKs, pydantic, PyYAML, and
# Rich (typer's Rich help formatter pulls in markdown-it and pygments: half of the start-up).
HEAVY = (
    "pymongo", "bson", "boto3", "botocore", "kubernetes", "pyVmomi", "pydantic", "yaml", "rich",
)  # fmt: skip


def imported_modules(*args: str) -> set[str]:
    """Every module `python -m rsdrill.cli ARGS` imports, from its -X importtime report."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rsdrill.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # "import time: self [us] | cumulative | imported package", then one line per module.
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return {line.rsplit("|", 1)[1].strip() for line in lines[1:]}


@pytest.mark.parametrize("args", [("--help",), ("--version",)])
def test_help_imports_nothing_heavy(args: tuple[str, ...]) -> None:
    modules = imported_modules(*args)
    assert {"typer", "rsdrill.cli.run"} <= modules  # the report was parsed
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert not heavy, f"rsdrill {' '.join(args)} imports {heavy}"
    # Platforms are looked up when an experiment names one, never to print the help.
    loaded = sorted(m for m in modules if m.startswith(("rsdrill.platforms", "rsdrill.registry")))
    assert not loaded, f"rsdrill {' '.join(args)} loads platforms: {loaded}"


def test_shell_completion_completes_commands_and_imports_nothing_heavy() -> None:
    """Typer's completion (`rsdrill --install-completion`): the shell asks the console script,
    which answers from the command tree without loading a driver or an SDK (Typer itself loads
    pydantic to build the parameters it completes)."""
    env = {"COMP_WORDS": "rsdrill sand", "COMP_CWORD": "1", "_RSDRILL_COMPLETE": "complete_bash"}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c",
         "import sys; sys.argv = ['rsdrill']; from rsdrill.cli.entry import main; main()"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )  # fmt: skip
    assert proc.stdout.split() == ["sandbox"], proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    loaded = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines[1:]}
    heavy = set(HEAVY) - {"pydantic"}
    assert not loaded & heavy, loaded & heavy


def test_validate_imports_no_driver_and_no_platform_sdk() -> None:
    """Validating the whole catalog (every platform's files) needs neither pymongo nor a cloud
    SDK: it once imported pymongo through the probes' entry-point group name and the machine
    platforms' checks (a third of a second before the first line)."""
    catalog = sorted(str(p) for p in (REPO / "experiments").rglob("*.yaml"))
    modules = imported_modules("validate", *catalog)
    assert "rsdrill.experiment.schema" in modules  # the report was parsed
    sdks = ("pymongo", "bson", "boto3", "botocore", "kubernetes", "pyVmomi", "pyVim", "mfusepy")
    loaded = sorted(m for m in modules if m.split(".")[0] in sdks)
    assert not loaded, loaded


def test_a_commands_exit_neither_waits_for_closed_clients_nor_collects_garbage() -> None:
    """pymongo's exit handler joins each client's background threads (1 s at most each), and
    a closed client's sleep up to 0.5 s before they see it: a run would end ~0.5 s after its
    last line. Five executors that sleep 30 s stand for them: with the handler, 5 s. And the
    collector's passes at shutdown are skipped: what the command made is frozen."""
    code = (
        "import atexit, gc, sys, time\n"
        "from pymongo.periodic_executor import PeriodicExecutor\n"
        "import pymongo.synchronous.monitor\n"
        "executors = [PeriodicExecutor(interval=30, min_interval=30, target=lambda: True,\n"
        "                              name='sleeper') for _ in range(5)]\n"
        "for e in executors:\n"
        "    e.open()\n"
        "time.sleep(0.2)\n"
        "for e in executors:\n"
        "    e.close()\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
        "sys.argv = ['rsdrill', '--version']\n"
        "from rsdrill.cli.entry import main\n"
        "main()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()  # the version: main() has returned
    printed = time.monotonic()
    proc.wait(timeout=60)
    err = proc.stderr.read()
    assert proc.returncode == 0 and line.strip(), err
    assert time.monotonic() - printed < 2.5
    frozen = int(err.split("frozen ", 1)[1].split()[0])
    assert frozen > 10_000, err
