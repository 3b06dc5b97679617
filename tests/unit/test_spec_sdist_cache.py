"""bench/spec_conformance.py's pymongo source cache: two runs on a fresh clone (the conformance
tests on two workers) take turns unpacking it; the second finds the first's tree."""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "spec_conformance.py"


def _bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("spec_conformance_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look it up there
    monkeypatch.syspath_prepend(str(BENCH.parent))  # as a script: its own folder (plugins/)
    spec.loader.exec_module(module)
    return module


def test_two_runs_at_once_unpack_the_source_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _bench(monkeypatch)
    monkeypatch.setattr(bench, "CACHE", tmp_path)
    downloads: list[float] = []

    def download(argv: list[str], check: bool) -> None:
        """pip download, as slow as a real one is, of an archive with nested directories."""
        downloads.append(time.monotonic())
        time.sleep(0.3)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for name in ("pymongo-9.9/test/__init__.py", "pymongo-9.9/test/csot/a.json"):
                info = tarfile.TarInfo(name)
                archive.addfile(info, io.BytesIO(b""))
        (tmp_path / "pymongo-9.9.tar.gz").write_bytes(buffer.getvalue())

    monkeypatch.setattr(bench.subprocess, "run", download)
    results: list[Any] = []

    def one() -> None:
        try:
            results.append(bench.sdist("9.9"))
        except Exception as exc:  # the failure is the result under test
            results.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == [tmp_path / "pymongo-9.9"] * 2, results
    assert len(downloads) == 1
    assert (tmp_path / "pymongo-9.9" / "test" / "csot" / "a.json").exists()
