"""A results directory is one run's at a time (rsdrill/engine/outdir.py): held by another
process, it is refused; the default one of a run started in the same second is another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rsdrill.engine.outdir import OutDirBusy, claim, claim_new
from rsdrill.errors import RsdrillError

# Another process holding the directory as a run does, until its stdin closes.
HOLDER = """
import sys
from pathlib import Path
from rsdrill.engine.outdir import claim
claim(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def _holder(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_directory_another_process_holds_is_refused_until_it_ends(tmp_path: Path) -> None:
    out = tmp_path / "results"
    holder = _holder(out)
    try:
        with pytest.raises(OutDirBusy, match="another rsdrill run is writing its results"):
            claim(out)
        assert issubclass(OutDirBusy, RsdrillError)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    assert claim(out) == out  # a run that ended holds nothing, and leaves no lock file
    assert claim(out) == out  # this process's own claim again: held already
    assert list(out.iterdir()) == []


def test_a_new_directory_is_never_one_that_exists(tmp_path: Path) -> None:
    base = tmp_path / "rs3-primary-kill-20240501-020000"
    base.mkdir()
    assert claim_new(base) == base.with_name(base.name + "-2")
    assert claim_new(base) == base.with_name(base.name + "-3")
    assert claim_new(tmp_path / "fresh") == tmp_path / "fresh"
