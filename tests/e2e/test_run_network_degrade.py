"""`rsdrill run` of the catalog's network-degrade experiments on the sandbox: the slow link
raises the p50 write latency by the added round trip (±25 %) while it lasts; the lossy link
makes writes time out that did not before. Then, after a SIGKILLed run, `rsdrill recover`
removes the redirect table and stops the proxy."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rsdrill.analysis.latency import percentile
from rsdrill.platforms.machine.degrade import PROXY_MODULE
from rsdrill.platforms.machine.network import rsdrill_tables
from tests.e2e.catalog import catalog, result_of, run_cli
from tests.e2e.test_run_cli import _wait_for_text
from tests.harness.cli import Rsdrill, rsdrill_run

INSTALL = Path(__file__).resolve().parents[2] / ".ci" / "install-netfilter"
FAULT_S = 8.0


@pytest.fixture(autouse=True)
def nft() -> None:
    if shutil.which("nft") is None:
        subprocess.run([str(INSTALL)], check=True, timeout=300)
    assert shutil.which("nft"), f"{INSTALL} did not install nft"


def _writes(out: Path) -> list[dict[str, Any]]:
    ops = map(json.loads, (out / "history.jsonl").read_text().splitlines())
    return [op for op in ops if op.get("probe") == "write"]


def _window(writes: list[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    return [op for op in writes if start <= op["t_start"] and op["t_end"] <= end]


def _p50_ms(ops: list[dict[str, Any]]) -> float:
    values = sorted((op["t_end"] - op["t_start"]) * 1000 for op in ops if op["outcome"] == "ok")
    assert len(values) >= 20, f"only {len(values)} successful writes"
    return percentile(values, 50)


def _fault_window(tmp_path: Path, name: str) -> tuple[list[dict[str, Any]], float, float, float]:
    """The run's writes, and when its fault was injected (stamped before the injection began),
    verified in force, and reverted."""
    document = catalog(name, fault_s=f"{FAULT_S:g}s")
    code, output, out = run_cli(tmp_path, document)
    assert code == 0, output
    fault = result_of(out)["faults"][0]
    assert fault["kind"] == "network-degrade"
    times = fault["injected_at_s"], fault["verified_at_s"], fault["reverted_at_s"]
    return _writes(out), *times


@pytest.mark.slow
def test_slow_link_raises_p50_write_latency_by_the_added_round_trip(tmp_path: Path) -> None:
    writes, injected, in_force, reverted = _fault_window(tmp_path, "primary-slow-link")
    first = writes[0]["t_start"]  # the probes start once the sandbox is up
    before = _p50_ms(_window(writes, first + 0.5, injected))
    # From 1 s in: the pooled connection has been rerouted through the proxy.
    during = _p50_ms(_window(writes, in_force + 1.0, reverted))
    added = 2 * 50.0  # the experiment's latency, each way
    assert 0.75 * added <= during - before <= 1.25 * added, (before, during)
    after = _p50_ms(_window(writes, reverted + 0.5, reverted + 10.0))
    assert after - before < 0.25 * added, (before, after)


@pytest.mark.slow
def test_lossy_link_makes_writes_time_out(tmp_path: Path) -> None:
    writes, injected, _, reverted = _fault_window(tmp_path, "primary-lossy-link")
    steady = _window(writes, writes[0]["t_start"], injected)
    lossy = _window(writes, injected, reverted)
    timeouts_before = sum(op["outcome"] == "timeout" for op in steady)
    timeouts_during = sum(op["outcome"] == "timeout" for op in lossy)
    assert timeouts_before == 0, steady
    assert timeouts_during >= 3, [op["outcome"] for op in lossy]


def _proxies() -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:
            continue
        if PROXY_MODULE.encode() in args:
            found.append(int(proc.name))
    return found


@pytest.mark.slow
def test_recover_after_sigkill_removes_the_redirect_and_stops_the_proxy(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    base = free_port_base(3)
    document = catalog("primary-slow-link", fault_s="60s", port_base=base, keep=True)
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(document))
    env = {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}
    proxies_before = set(_proxies())
    proc = Rsdrill(
        ["run", str(path), "--out", str(tmp_path / "out"),
         "--no-live", "--no-history"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        _wait_for_text(proc, "injected", 90)
        ours = [t for t in rsdrill_tables() if t.startswith(tuple(f"rsdrill-{base + i}-"
                                                                   for i in range(3)))]  # fmt: skip
        assert ours, "the redirect table is in force"
        started = set(_proxies()) - proxies_before
        assert started, "the proxy runs"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert set(_proxies()) >= started, "a killed run leaves its proxy behind"
        done = rsdrill_run(
            ["recover"],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "links restored" in done.stdout, done.stdout
        assert not set(ours) & set(rsdrill_tables())
        deadline = time.monotonic() + 5
        while set(_proxies()) & started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not set(_proxies()) & started
    finally:
        if proc.poll() is None:
            proc.kill()
        rsdrill_run(
            ["sandbox", "down", "--dir",
             str(tmp_path / "out" / "sandbox")],
            capture_output=True, timeout=60, env=env, check=False,
        )  # fmt: skip
