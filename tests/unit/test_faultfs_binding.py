"""mfusepy is an extra (`faultfs`): without it faultfs's Python layer says in one line which extra
to install, and nothing else of rsdrill needs it (every import of it is lazy)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rsdrill.engine.check import _fuse_check
from rsdrill.faultfs.binding import EXTRA, MISSING, fuse_binding
from rsdrill.faultfs.compiled import LAYER_ENV, compiled_binary
from rsdrill.faultfs.mount import FaultFSError

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

# Run in a fresh interpreter where `import mfusepy` fails as it does where it is not installed.
_WITHOUT_MFUSEPY = "import sys; sys.modules['mfusepy'] = None\n"


def test_missing_mfusepy_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mfusepy", None)
    with pytest.raises(FaultFSError) as raised:
        fuse_binding()
    message = str(raised.value)
    assert message == MISSING
    assert "\n" not in message
    assert "pip install 'rsdrill[faultfs]'" in message


def test_the_extra_named_holds_mfusepy_and_only_the_extras_do() -> None:
    extras = PROJECT["optional-dependencies"]
    assert any(req.startswith("mfusepy") for req in extras[EXTRA])
    assert not any(req.startswith("mfusepy") for req in PROJECT["dependencies"])
    included = [req.removeprefix("rsdrill[").rstrip("]").split(",") for req in extras["dev"]
                if req.startswith("rsdrill[")]  # fmt: skip
    assert any(EXTRA in names for names in included), "the dev extra includes faultfs"


def test_project_urls_are_declared() -> None:
    urls = PROJECT["urls"]
    assert {"Homepage", "Source", "Issues"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())


def test_nothing_but_the_python_layer_imports_mfusepy() -> None:
    """Every rsdrill module imports without mfusepy (its `__main__` modules and the FUSE
    operations, which the daemon imports after fuse_binding(), aside), and `rsdrill --help`
    answers."""
    script = _WITHOUT_MFUSEPY + (
        "import importlib, pkgutil, rsdrill\n"
        "skipped = {'rsdrill.faultfs.operations'}\n"
        "for info in pkgutil.walk_packages(rsdrill.__path__, 'rsdrill.'):\n"
        "    if info.name not in skipped and not info.name.endswith('__main__'):\n"
        "        importlib.import_module(info.name)\n"
        "assert 'mfusepy' not in {m for m, v in sys.modules.items() if v is not None}\n"
        "sys.argv = ['rsdrill', '--help']\n"
        "from rsdrill.cli.entry import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Commands:" in done.stdout


def test_rsdrill_check_names_the_extra_for_the_python_layer_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`rsdrill check` of a storage-fault experiment: the Python layer without mfusepy is a
    failed check saying what to install; the compiled layer needs no binding."""
    monkeypatch.setitem(sys.modules, "mfusepy", None)
    monkeypatch.setenv(LAYER_ENV, "python")
    check = _fuse_check(mirrored=False)
    assert check.ok is False and MISSING.removeprefix("faultfs: ") in check.detail
    if compiled_binary() is not None:
        monkeypatch.setenv(LAYER_ENV, "compiled")
        assert MISSING.removeprefix("faultfs: ") not in _fuse_check(mirrored=False).detail
        # Mirrored data are the Python layer's: asking for the compiled one is the problem.
        mirrored = _fuse_check(mirrored=True)
        assert mirrored.ok is False and "mirrored mount is served by the Python" in mirrored.detail
    monkeypatch.delenv(LAYER_ENV)
    assert MISSING.removeprefix("faultfs: ") in _fuse_check(mirrored=True).detail
