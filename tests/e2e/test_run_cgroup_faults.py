"""cpu-starve and memory-pressure on the sandbox (cgroup v1): a starved primary answers slowly
and nothing fails over; a primary out of memory is OOM-killed and the set fails over as for a
lost host; after a SIGKILLed run, `rsdrill recover` stops the neighbour, removes the cgroup and
restarts the member."""

from __future__ import annotations

import json
import math
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.loader import load_experiment
from rsdrill.platforms.machine.cgroup import mount_of
from rsdrill.sandbox.cluster import Sandbox
from tests.e2e.test_run_cli import _recover, _start, _wait_for_text

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def _run(name: str, tmp_path: Path, port_base: int) -> tuple[object, list[dict[str, object]]]:
    document = yaml.safe_load((EXPERIMENTS / name).read_text())
    document["target"]["port_base"] = port_base
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    out = tmp_path / "out"
    result = run_experiment(load_experiment(path), RunOptions(out_dir=out, live=False))
    ops = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    return result, ops


def _groups(controller: str, port_base: int) -> list[Path]:
    names = {f"rsdrill-{port_base + i}" for i in range(3)}
    return [p for p in mount_of(controller).rglob("rsdrill-*") if p.name in names]


def _neighbours() -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if b"rsdrill-memory-neighbour" in cmdline:
            found.append(int(proc.name))
    return found


def test_a_starved_primary_answers_slowly_without_failing_over(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    base = free_port_base(3)
    result, ops = _run("primary-cpu-starve.yaml", tmp_path, base)
    assert result.verdict == "pass", result.error  # type: ignore[attr-defined]
    (fault,) = result.faults  # type: ignore[attr-defined]
    # Every attempt counts, failed ones too: on a busy machine a starved member can miss the
    # probe's 2 s timeout on every write, and a write that timed out took at least that long.
    writes = [o for o in ops if o["probe"] == "write"]

    def p50(first: float, last: float, *, done_by: float = math.inf) -> float:
        """The median latency of the writes started between `first` and `last`."""
        took = [o["t_end"] - o["t_start"] for o in writes
                if first < o["t_start"] < last and o["t_end"] < done_by]  # fmt: skip
        assert took, (f"no write started between {first:.2f} s and {last:.2f} s", fault)
        return statistics.median(took)

    before = p50(0, fault.injected_at_s, done_by=fault.injected_at_s)
    # Writes started while the starvation was in force, however late they ended: on a busy
    # machine the slowest, those that waited out the probe's timeout, end after the revert.
    during = p50(fault.verified_at_s + 0.5, fault.reverted_at_s)
    after = p50(fault.reverted_at_s + 0.5, math.inf)
    print(f"write p50: before {before * 1000:.1f} ms, during {during * 1000:.1f} ms, "
          f"after {after * 1000:.1f} ms")  # fmt: skip
    assert during > 5 * before and during > 0.05
    assert after < during / 5
    assert result.metrics.failover_s is None  # type: ignore[attr-defined]
    assert not _groups("cpu", base)


def test_a_primary_out_of_memory_is_killed_and_the_set_fails_over(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    base = free_port_base(3)
    result, _ = _run("primary-memory-pressure.yaml", tmp_path, base)
    assert result.verdict == "pass", result.error  # type: ignore[attr-defined]
    (fault,) = result.faults  # type: ignore[attr-defined]
    assert fault.verified_at_s - fault.injected_at_s < 5  # the OOM killer took it
    metrics = result.metrics  # type: ignore[attr-defined]
    # As a lost host: an election after electionTimeout (2 s), the member back once restarted.
    assert metrics.failover_s is not None and 1.5 < metrics.failover_s < 5
    assert metrics.recovery_s[fault.target] is not None
    assert not _groups("memory", base)
    assert not _neighbours()


def test_recover_undoes_the_memory_pressure_of_a_killed_run(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    base = free_port_base(3)
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: memory-killed\n"
        f"target: {{platform: sandbox, topology: rs3, keep: true, election_timeout: 2s, "
        f"port_base: {base}}}\n"
        "faults:\n  - {at: 1s, kind: memory-pressure, select: primary, duration: 120s}\n"
    )
    out = tmp_path / "out"
    proc = _start(tmp_path, path)
    sandbox = Sandbox(out / "sandbox")
    try:
        _wait_for_text(proc, "injected memory-pressure", 90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        # Left behind by the killed run (the neighbour itself is OOM-killed once it is alone).
        assert _groups("memory", base)
        recover = _recover(tmp_path)
        assert recover.returncode == 0, recover.stdout + recover.stderr
        assert "restarted" in recover.stdout, recover.stdout
        assert not _groups("memory", base)
        assert not _neighbours()
        deadline = time.monotonic() + 30
        while sorted(s.state for s in sandbox.status()) != ["PRIMARY", "SECONDARY", "SECONDARY"]:
            assert time.monotonic() < deadline, [s.state for s in sandbox.status()]
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        sandbox.down()
