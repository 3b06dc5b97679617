"""The fleet's stop lever against concurrent runs: N `rsdrill run`s, each on its own sandbox
with a secondary frozen for a minute, then `rsdrill lever engage`; for each run, the time from
the engage command's return to the run's exit, its exit status and whether its fault was
reverted. The issue's bound: every run ended within 5 s, every fault reverted.

Usage: python bench/fleet_lever.py [--runs 4] [--rounds 1] [--store mongodb://…]
(the default store: a fresh $RSDRILL_HOME/fleet.sqlite; a shared store needs RSDRILL_FLEET_KEY)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rsdrill.platforms.sandbox.hosts import free_port_base

EXPERIMENT = """name: lever-bench-{i}
target: {{platform: sandbox, topology: rs3, election_timeout: 2s, heartbeat_interval: 500ms,
         port_base: {base}}}
probes:
  availability: {{interval: 20ms}}
faults:
  - {{at: 1s, kind: host-freeze, select: secondary, duration: 60s}}
observe: {{after_revert: 1s}}
"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rsdrill.cli", *args]


def _round(runs: int, work: Path, env: dict[str, str]) -> list[tuple[float, int, bool]]:
    procs, outs, injected = [], [], []
    for i in range(runs):
        exp = work / f"exp{i}.yaml"
        exp.write_text(EXPERIMENT.format(i=i, base=free_port_base(3)))
        outs.append(work / f"out{i}")
        procs.append(subprocess.Popen(_cli("run", str(exp), "--out", str(outs[-1]), "--no-live",
                                           "--no-history"),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))  # fmt: skip
    for proc in procs:
        seen = threading.Event()
        injected.append(seen)

        def watch(p: subprocess.Popen[str] = proc, e: threading.Event = seen) -> None:
            assert p.stdout is not None
            for line in p.stdout:
                if "injected host-freeze" in line:
                    e.set()

        threading.Thread(target=watch, daemon=True).start()
    for seen in injected:
        if not seen.wait(120):
            raise SystemExit("a run never injected its fault")
    subprocess.run(_cli("lever", "engage", "--reason", "bench"), env=env, check=True,
                   capture_output=True)  # fmt: skip
    engaged = time.monotonic()
    ended: list[tuple[float, int, bool]] = []
    for proc, out in zip(procs, outs, strict=True):
        code = proc.wait(timeout=120)
        took = time.monotonic() - engaged
        faults = json.loads((out / "result.json").read_text())["faults"]
        ended.append((took, code, all(f["reverted_at_s"] is not None for f in faults)))
    subprocess.run(_cli("lever", "disengage"), env=env, check=True, capture_output=True)
    return ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--store", default=None)
    args = parser.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="rsdrill-lever-") as tmp:
        env = {**os.environ, "RSDRILL_HOME": str(Path(tmp) / "home")}
        if args.store:
            env["RSDRILL_HISTORY"] = args.store
        for r in range(args.rounds):
            work = Path(tmp) / f"round{r}"
            work.mkdir()
            ended = _round(args.runs, work, env)
            for i, (took, code, reverted) in enumerate(ended):
                print(f"round {r + 1} run {i + 1}: ended {took:.2f} s after the engage, exit "
                      f"{code}, faults reverted: {reverted}")  # fmt: skip
            worst = max([worst, *(t for t, _, _ in ended)])
            if any(code != 5 or not reverted for _, code, reverted in ended):
                raise SystemExit("a run did not stop as the lever asks")
    print(f"worst: {worst:.2f} s (bound 5 s: {worst / 5:.2f}x)")


if __name__ == "__main__":
    main()
