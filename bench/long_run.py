"""Long runs: what hours of probe history cost rsdrill in memory, analysis time and report size.

1. A real sandbox run of `--real-minutes` (rs3, the main job's probes at their defaults, the
   primary killed at 5 s and back after 30 s, then observed to the end): rsdrill's own peak
   resident size (VmHWM of the `rsdrill run` process), its wall time, its ops and report sizes.
2. That run's history stretched to each of `--hours`: its steady tail (the last minute, or the
   last quarter of a shorter run) repeated after the real ops up to the length asked, in a
   fresh process per length, appended to a History one op at a time as a run that long
   would; then the run's own analysis (`compute_metrics`) and reports (`write_reports`): peak
   resident size, the time of each, and the size of report.html and history.jsonl. A length
   whose cell outlasts `--timeout` is reported as such.

Usage: python bench/long_run.py [--real-minutes 30] [--hours 0.5,2,24] [--timeout 900]
       [--history DIR] (reuse a real run's out dir instead of running one)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TAIL_S = 60.0
EXPERIMENT = """name: long-run
target: {{platform: sandbox, topology: rs3}}
probes:
  availability: {{interval: 20ms, timeout: 250ms, write_concern: majority, retries: false}}
  durability: {{write_concern: majority}}
faults:
  - {{at: 5s, kind: host-kill, select: primary, duration: 30s, restart: {{volume: keep}}}}
observe: {{after_revert: {after_s}s, until_recovered: false}}
"""

# Run in a fresh interpreter per length: its peak resident size is the cell's alone.
CELL = r"""
import json, resource, sys, time
from dataclasses import replace
from pathlib import Path
from rsdrill.analysis.metrics import compute_metrics
from rsdrill.history import FaultRecord, History
from rsdrill.report import write_reports
from rsdrill.result import Result

out, dest = Path(sys.argv[1]), Path(sys.argv[4])
hours, tail_s = float(sys.argv[2]), float(sys.argv[3])
result = Result.model_validate_json((out / "result.json").read_text())
real = History.read_jsonl(out / "history.jsonl").ops()
# The steady tail ends with the probes' last write: after it come the ledger's readback and the
# run's end, which are once a run, not once a minute.
end = max(op.t_end for op in real if op.probe == "write")
tail_s = min(tail_s, end / 4)
# Each copy with details of its own (decoded afresh, as a probe builds them), not shared.
tail = [(op, json.dumps(op.detail, default=str)) for op in real
        if end - tail_s <= op.t_start and op.t_end <= end]  # fmt: skip
# Appended one by one, as the probes of a run that long would have: the History spills.
history, shift, length = History.from_ops(real), end, hours * 3600
del real
while shift < length:
    for op, detail in tail:
        history.append(replace(op, t_start=op.t_start - (end - tail_s) + shift,
                               t_end=op.t_end - (end - tail_s) + shift, detail=json.loads(detail)))
    shift += tail_s
ops = history
faults = [FaultRecord(i, f.kind, f.target, f.injected_at_s, f.verified_at_s, f.reverted_at_s,
                      f.approximation, f.detail, f.applied_at_s)
          for i, f in enumerate(result.faults)]
held_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
started = time.monotonic()
metrics = compute_metrics(ops, faults, duration_s=length)
analysed = time.monotonic() - started
started = time.monotonic()
paths = write_reports(dest, result.model_copy(update={"metrics": metrics}), ops)
reported = time.monotonic() - started
print(json.dumps({"ops": len(ops), "held_mb": held_mb,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "analysis_s": analysed, "reports_s": reported,
                  "html_mb": paths["html"].stat().st_size / 1e6,
                  "history_mb": paths["history"].stat().st_size / 1e6}))
"""


def _peak_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def real_run(minutes: float, work: Path) -> Path:
    """`rsdrill run` of `minutes`; prints its peak resident size, wall time and sizes."""
    experiment = work / "long-run.yaml"
    experiment.write_text(EXPERIMENT.format(after_s=max(minutes * 60 - 35, 1)))
    out = work / "out"
    argv = [sys.executable, "-m", "rsdrill.cli", "run", str(experiment), "--out", str(out),
            "--no-live", "--no-history"]  # fmt: skip
    started = time.monotonic()
    with (work / "run.log").open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        peak = 0.0
        while process.poll() is None:
            peak = max(peak, _peak_mb(process.pid) or 0.0)
            time.sleep(0.2)
    wall = time.monotonic() - started
    if process.returncode not in (0, 1):
        raise SystemExit(f"the real run exited {process.returncode}: see {work / 'run.log'}")
    ops = sum(1 for _ in (out / "history.jsonl").open())
    html = (out / "report.html").stat().st_size / 1e6
    print(
        f"real run {minutes:g} min: {wall:.0f} s, {ops} ops ({ops / wall:.0f}/s), "
        f"rsdrill peak RSS {peak:.0f} MB (last seen), report.html {html:.2f} MB",
        flush=True,
    )
    return out


# Appended to a copy of report.html: when the page's own scripts have run (the load event),
# on the page's clock, which starts when navigation does.
DRAWN = ('<script>addEventListener("load", () => setTimeout(() => '
         'document.body.dataset.drawnMs = performance.now()))</script></body>')  # fmt: skip


def drawn_ms(html: Path) -> float | None:
    """How long headless Chromium took from navigation to the report drawn (its scripts run
    after load), best of three; None without Chromium."""
    binary = shutil.which("chromium")
    if binary is None:
        return None
    timed = html.with_name("timed.html")
    timed.write_text(html.read_text().replace("</body>", DRAWN, 1))
    best = None
    for _ in range(3):
        with tempfile.TemporaryDirectory() as profile:
            dom = subprocess.run(
                [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", f"--user-data-dir={profile}",
                 "--dump-dom", timed.as_uri()],
                capture_output=True, text=True, timeout=120, check=False,
            ).stdout  # fmt: skip
        found = re.search(r'data-drawn-ms="([0-9.]+)"', dom)
        if found:
            best = min(best or math.inf, float(found.group(1)))
    return best


def stretched(out: Path, hours: float, timeout_s: float) -> None:
    with tempfile.TemporaryDirectory() as dest:
        argv = [sys.executable, "-c", CELL, str(out), str(hours), str(TAIL_S), dest]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                                  cwd=ROOT)  # fmt: skip
        except subprocess.TimeoutExpired:
            print(f"{hours:5g} h: not done within {timeout_s:.0f} s", flush=True)
            return
        drawn = drawn_ms(Path(dest) / "report.html") if done.returncode == 0 else None
    if done.returncode != 0:
        print(f"{hours:5g} h: failed: {done.stderr.strip().splitlines()[-1:]}", flush=True)
        return
    cell = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"{hours:5g} h: {cell['ops']:>10,} ops  history held {cell['held_mb']:7.0f} MB  "
        f"peak RSS {cell['peak_mb']:7.0f} MB  analysis {cell['analysis_s']:6.1f} s  "
        f"reports {cell['reports_s']:6.1f} s  report.html {cell['html_mb']:5.2f} MB, drawn in "
        f"{'-' if drawn is None else f'{drawn / 1000:.2f}'} s  "
        f"history.jsonl {cell['history_mb']:7.0f} MB",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real-minutes", type=float, default=30.0)
    parser.add_argument("--hours", type=lambda s: [float(h) for h in s.split(",")],
                        default=[0.5, 2.0, 24.0])  # fmt: skip
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per length")
    parser.add_argument("--history", type=Path, help="a real run's out dir to stretch")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        out = args.history or real_run(args.real_minutes, Path(work))
        for hours in args.hours:
            stretched(out, hours, args.timeout)


if __name__ == "__main__":
    main()
