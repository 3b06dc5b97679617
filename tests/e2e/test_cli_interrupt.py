"""Ctrl-C at any moment of `rsdrill run`'s start-up: one line or a result, never a traceback."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rsdrill

EXPERIMENT = """\
name: interrupt
target: {platform: sandbox, topology: rs1}
faults:
  - {at: 30s, kind: stepdown}
"""


@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.05, 0.1, 0.2, 0.4])
def test_sigint_during_start_up_prints_no_traceback(tmp_path: Path, delay_s: float) -> None:
    # This environment's script, not whichever comes first on PATH (a virtualenv run by its
    # python without being activated would find the base interpreter's, another install).
    script = shutil.which("rsdrill", path=str(Path(sys.executable).parent))
    assert script, "the rsdrill console script is installed with the package"
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT)
    proc = subprocess.Popen(
        [script, "run", str(experiment), "--out", str(tmp_path / "out"), "--no-history",
         "--no-live"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
        # As from a terminal: test runners' workers may ignore SIGINT, and children inherit it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    if "Fatal Python error: init_" in err or _before_rsdrill_took_over(err):
        return  # Python's start-up or the launcher's import was interrupted: no rsdrill code ran
    assert "Traceback" not in out + err, err
    # Killed by the signal before Python itself was up, interrupted before the run began
    # (130), or the run's own abort (3) with its result.
    assert proc.returncode in (-signal.SIGINT, 130, 3), (proc.returncode, out, err)
    if proc.returncode == 3:
        assert (tmp_path / "out" / "result.json").exists()


# How Python's own code begins what it prints of an exception it then drops.
PYTHON_DROPPED = ("Exception ignored in", "Failed checking if argv[0] is an import path entry")


def _before_rsdrill_took_over(err: str) -> bool:
    """A KeyboardInterrupt raised before rsdrill's entry point could install its handler: Python's
    own start-up (site and the .pth files it runs), the launcher pip wrote (its `from
    rsdrill.cli.entry import main`), or the module-level imports that runs. No frame of the
    traceback is inside a function of rsdrill's.

    Or one Python itself dropped there: raised inside a callback (importlib's module-lock weakref)
    it is printed as "Exception ignored in" and lost; raised while the interpreter looks at
    argv[0] before running the script (main.c's pymain_get_importer, in frozen zipimport) it is
    printed after "Failed checking if argv[0] is an import path entry" and lost (CI57, at
    50 ms). The run then goes on to its end. Only Python's default handler raises: once
    rsdrill's is in place, SIGINT never becomes an exception that could be dropped like that."""
    frames = re.findall(r'^\s*File "([^"]+)", line \d+, in (\S+)', err, re.MULTILINE)
    package = str(Path(rsdrill.__file__).parent)
    dropped = err.startswith(PYTHON_DROPPED) and "\nKeyboardInterrupt" in err
    return (
        (err.rstrip().endswith("KeyboardInterrupt") or dropped)
        and bool(frames)
        and not any(path.startswith(package) and fn != "<module>" for path, fn in frames)
    )


def test_sigint_that_a_library_drops_while_loading_still_ends_the_command(tmp_path: Path) -> None:
    """Ctrl-C while the file is being loaded, inside library code that drops (or converts) a
    KeyboardInterrupt, as pydantic's validator building can: the command still ends with 130
    and no run starts."""
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT)
    program = (
        "import os, signal, sys, time\n"
        "import rsdrill.experiment.loader as loader\n"
        "real = loader.load_experiment\n"
        "def load_in_a_careless_library(path):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.2)\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
        "    return real(path)\n"
        "loader.load_experiment = load_in_a_careless_library\n"
        "from rsdrill.cli.entry import main\n"
        f"sys.argv = ['rsdrill', 'run', {str(experiment)!r}, '--out', {str(tmp_path / 'out')!r},"
        " '--no-history', '--no-live']\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=90,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.returncode == 130, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()  # the runner never started
