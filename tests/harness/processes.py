"""The tools the harnesses build and start, stopping them, and the runs the chaos tests kill."""

from __future__ import annotations

import os
import signal
import site
import subprocess
import sys
import threading
import time
from pathlib import Path

# Install scripts this process has seen succeed: each runs once per process.
_installed: dict[Path, str] = {}
INSTALL_TIMEOUT_S = 3600.0


def installed(install: Path) -> str:
    """Runs a tool's install script (.ci/install-*) once in this process and returns what it
    printed; fails loudly, never skips. `.ci/run` builds the tools while the tests run, so
    this may wait for that build (the script's lock): the wait is not the test's, and the
    test's own timeout (pytest-timeout's alarm) is held while it lasts."""
    if install not in _installed:
        paused = signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            done = subprocess.run(["bash", str(install)], capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT_S)  # fmt: skip
        finally:
            if paused[0] > 0:
                signal.setitimer(signal.ITIMER_REAL, *paused)
        if done.returncode != 0:
            raise RuntimeError(f"{install} failed:\n{done.stdout}\n{done.stderr}")
        _installed[install] = done.stdout
    return _installed[install]


def ensure_built(binary: Path, install: Path) -> Path:
    """`binary`, as its `install` script (run once per process: `installed`) left it."""
    installed(install)
    if not binary.exists():
        raise RuntimeError(f"{install} succeeded but {binary} is missing")
    return binary


def python_named(directory: Path, name: str) -> Path:
    """This interpreter, run by a path whose last part is `name` (a process's comm is the name
    of the file it was started from), with this interpreter's packages. A bare link outside a
    virtualenv's bin/ finds no pyvenv.cfg and starts the base interpreter without them, so the
    link gets an environment of its own whose site-packages adds this one's (.pth files
    included: the editable install is one)."""
    env = directory / f"{name}-env"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    packages = env / "lib" / version / "site-packages"
    packages.mkdir(parents=True)
    home = Path(os.path.realpath(sys.executable)).parent
    (env / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\n")
    added = "; ".join(f"site.addsitedir({p!r})" for p in site.getsitepackages())
    (packages / "outer.pth").write_text(f"import site; {added}\n")
    link = env / "bin" / name
    link.parent.mkdir()
    link.symlink_to(sys.executable)
    return link


def stop(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace_s`; reaped either way."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace_s)


def kill_after_line(run: subprocess.Popen[str], marker: str, delay_s: float) -> str:
    """SIGKILL `run` `delay_s` after it prints a line holding `marker` (at once if it ends or
    60 s pass first); everything it printed."""
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert run.stdout is not None
        for line in run.stdout:
            lines.append(line)
            if marker in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not seen.wait(0.05) and run.poll() is None and time.monotonic() < deadline:
        pass
    if seen.is_set():
        time.sleep(delay_s)
    run.kill()
    run.wait(timeout=30)
    reader.join(10)
    return "".join(lines)
