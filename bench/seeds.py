"""The published failure reports' rows, run as experiments/seeds/ and set beside the reports'
figures: writes docs/seeds.md.

Each seed runs through `rsdrill run` on the sandbox (emulator members). The host-failure rows
also run on vCenter's API: vcsim (govmomi's simulator, built by .ci/install-vcsim) with one
cluster of four ESXi hosts, the catalog's vSphere experiment (experiments/vsphere-*.yaml, the
same HA model) and one VM per member on its own host, bound to a sandbox member by the test
harness (tests/harness/vsphere_binding.py: a powered-off VM SIGKILLs its member; a powered-on
one boots for the same assumed 60 s, then starts it). The other shard's row runs two sets on
the four hosts, the failed host holding one's primary and the other's secondary, the other
watched by rsdrill's write probe (tests/harness/vsphere_reference.py: run_shared_host).
The capacity-disk rows run on the sandbox only, on mirrored storage (FTT=1:
target.sandbox.mirror, one copy failed) and, as their control, without it (FTT=0).

The Parse seed (a stepdown onto a cold secondary) runs in this process, its degraded period
measured as bench/cold_cache.py does, beside the same run onto a warm secondary.

Usage: python bench/seeds.py [--runs 1] [--jobs 1] [--only NAME] [--no-vcsim] [--no-parse]
       [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The test harness (vcsim, the VM binding), imported as the tests import it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness.vcsim import Vcsim, vcsim
from harness.vsphere_reference import run_catalog, run_shared_host, vetoed_elections

from bench.cold_cache import Point
from bench.cold_cache import measure as measure_takeover
from rsdrill.faults.host_kill import HA_BOOT_S, HA_DETECT_S

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "experiments" / "seeds"
PUBLISHED_RS1_S = 120.0  # "about 120 s"
RUN_TIMEOUT_S = 420
PARSE = (
    "Parse on MongoDB: a stepdown onto a cold secondary (AWS EBS; published: about 7 "
    "minutes of 200-400 ms reads on provisioned IOPS, nearly two hours before)"
)
# The Parse seed's working set and cap (bench/cold_cache.py sweeps both).
PARSE_SEED = "parse-cold-secondary"
PARSE_SIZE_MB = 4.0
PARSE_IOPS = 50
REPORT = ("MongoDB on the vSAN reference architecture (4 ESXi hosts, vSAN FTT=1, MongoDB 3.4, "
          "YCSB workloads A and B, writes w:1 j:true)")  # fmt: skip


@dataclass
class Measured:
    """One run of a seed: its result, election attempts the arbiter vetoed (sandbox ground
    truth, after the fault) and the write probe's failed attempts (from its history)."""

    result: dict[str, Any]
    vetoed: int
    failed_writes: int = 0
    # The other shard's vcsim run: the failover of the set whose primary shared the host.
    beside_failover_s: float | None = None

    @property
    def metrics(self) -> dict[str, Any]:
        return dict(self.result["metrics"])

    @property
    def ha(self) -> dict[str, Any] | None:
        faults = self.result["faults"]
        return faults[0]["detail"].get("ha") if faults else None

    @property
    def resync_s(self) -> float | None:
        """How long the failed copy's resync took (mirrored storage), else None."""
        replica = self.result["faults"][0]["detail"].get("replica") or {}
        return (replica.get("resync") or {}).get("seconds")


@dataclass(frozen=True)
class VcsimRun:
    """How the harness runs a row on vcsim: the catalog experiment and the set's settings."""

    topology: str
    election_timeout_ms: int = 10_000
    heartbeat_timeout_s: int = 10
    # Two sets on the hosts, the failed one holding the first's primary and this one's
    # secondary: the row is the second set's.
    shared_host: bool = False


@dataclass(frozen=True)
class Row:
    seed: str
    replica_set: str
    failure: str
    published: str
    vcsim: VcsimRun | None
    why: Callable[[list[Measured]], str]
    """One sentence on why rsdrill's figure differs from the report's (from its sandbox runs)."""


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _gaps(runs: list[Measured]) -> list[float]:
    return [r.metrics["write_unavailable_s"] for r in runs if r.metrics["write_unavailable_s"]]


def _why_rs1_host(runs: list[Measured]) -> str:
    phases = [r.ha for r in runs if r.ha and r.ha["member_start_s"] is not None]
    start = _median([p["member_start_s"] for p in phases]) if phases else float("nan")
    more = PUBLISHED_RS1_S - _median(_gaps(runs))
    return (f"Both are HA's detection, the guest's boot and mongod's start; here detection is "
            f"vSphere HA's documented {HA_DETECT_S:g} s, the boot an assumed {HA_BOOT_S:g} s "
            f"and the emulator's start {start:.1f} s, where the report's real guest booted and "
            f"MongoDB 3.4 replayed its journal after an unclean shutdown: {more:.0f} s more "
            "than assumed here.")  # fmt: skip


def _why_rs3_host(runs: list[Measured]) -> str:
    vetoed = sum(r.vetoed > 0 for r in runs)
    return ("MongoDB's default electionTimeoutMillis (10 s, plus up to 15 %) bounds a host "
            "failure's failover from below, and in a PSA set the arbiter refuses its vote until "
            "its own heartbeatTimeoutSecs (10 s) marks the primary down, so an election called "
            f"before then loses and waits another timeout ({vetoed} of {len(runs)} sandbox "
            "runs here); the report's \"under 10 s\" implies faster detection than these "
            "defaults.")  # fmt: skip


def _why_rs3_fast(runs: list[Measured]) -> str:
    vetoed = sum(r.vetoed for r in runs)
    return ("Halving electionTimeoutMillis does not get a PSA set under 10 s: the secondary's "
            "elections every 5 s lose to the arbiter's veto until its 10 s heartbeat timeout "
            f"({vetoed} vetoed attempts in {len(runs)} sandbox runs), so the one that wins "
            "comes after 10 s, no sooner than with the default.")  # fmt: skip


def _why_rs3_fast_heartbeat(runs: list[Measured]) -> str:
    return ("With the arbiter's heartbeatTimeoutSecs at 3 s, below the election timeout, it "
            "marks the dead primary DOWN by the time the secondary's election timer fires, the "
            "first election wins (at worst the second), and the set is writable again in "
            "under 10 s, as the report saw.")  # fmt: skip


def _failed(runs: list[Measured]) -> str:
    """How many of the runs' writes failed, in words that do not claim none did when some did
    (a write may time out when this shared machine stalls the probe: the row says so)."""
    failed = sum(r.failed_writes for r in runs)
    said = "no write failed" if not failed else f"{failed} write{'s' * (failed > 1)} failed"
    return f"{said} in {len(runs)} runs"


def _why_other_set(runs: list[Measured]) -> str:
    return ("A host failure takes from each set only the member it held: this set lost its "
            "secondary and kept its primary and, with the arbiter, a majority of votes "
            f"({_failed(runs)}); its figure is the longest window between two acknowledged "
            "writes: the write probe's own cadence on this shared machine, as in the FTT=1 "
            "rows.")  # fmt: skip


def _why_disk(runs: list[Measured]) -> str:
    resync = [r.resync_s for r in runs if r.resync_s is not None]
    took = f" (resync {_median(resync):.2f} s here)" if resync else ""
    return ("As vSAN with FTT=1, the member's data are on two copies: the failed copy's "
            f"operations are served from the other ({_failed(runs)}), and the copy is resynced "
            f"in the background on revert{took}; the figure is the longest window between two "
            "acknowledged writes: the write probe's own cadence (an interval plus a write, more "
            "when this shared machine delays a tick), with or without a fault.")  # fmt: skip


def _why_disk_ftt0(runs: list[Measured]) -> str:
    return ("Not a row of the report: the same disk failure with one copy of the data (FTT=0), "
            "what FTT=1 is for. The member dies on its first I/O error as mongod does; rs=1 "
            "waits for the disk and a restart, rs=3 for an election.")  # fmt: skip


ROWS = [
    Row("vsan-rs1-host-failure", "rs=1", "host power-off", "about 120 s",
        VcsimRun("rs1"), _why_rs1_host),
    Row("vsan-rs1-capacity-disk-failure", "rs=1, FTT=1", "capacity disk failure", "none",
        None, _why_disk),
    Row("vsan-rs1-capacity-disk-failure-ftt0", "rs=1, FTT=0", "capacity disk failure",
        "not in the report", None, _why_disk_ftt0),
    Row("vsan-rs3-host-failure", "rs=3 (primary, secondary, arbiter)", "host power-off",
        "under 10 s", VcsimRun("psa"), _why_rs3_host),
    Row("vsan-rs3-host-failure-election-5s", "rs=3 (PSA), electionTimeoutMillis 5 s",
        "host power-off", "under 10 s", VcsimRun("psa", election_timeout_ms=5000),
        _why_rs3_fast),
    Row("vsan-rs3-host-failure-election-5s-heartbeat-3s",
        "rs=3 (PSA), electionTimeoutMillis 5 s, heartbeatTimeoutSecs 3", "host power-off",
        "under 10 s", VcsimRun("psa", election_timeout_ms=5000, heartbeat_timeout_s=3),
        _why_rs3_fast_heartbeat),
    Row("vsan-rs3-host-failure-other-set",
        "rs=3 (PSA), another shard: its secondary on the failed host", "host power-off",
        "none (only the shard whose primary was on the host)",
        VcsimRun("psa", shared_host=True), _why_other_set),
    Row("vsan-rs3-capacity-disk-failure", "rs=3 (PSA), FTT=1", "capacity disk failure", "none",
        None, _why_disk),
    Row("vsan-rs3-capacity-disk-failure-ftt0", "rs=3 (PSA), FTT=0", "capacity disk failure",
        "not in the report", None, _why_disk_ftt0),
]  # fmt: skip


def run_seed(seed: str, work: Path) -> Measured:
    """`rsdrill run` of experiments/seeds/SEED.yaml on the sandbox (its SLO may fail: the
    figure is what counts)."""
    out = work / "out"
    done = subprocess.run(
        [sys.executable, "-m", "rsdrill.cli", "run", str(SEEDS / f"{seed}.yaml"), "--out",
         str(out), "--no-live", "--no-history", "--yes"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "RSDRILL_HOME": str(work / "home")},
    )  # fmt: skip
    if done.returncode not in (0, 1):
        sys.exit(f"{seed} on the sandbox ended {done.returncode}: {done.stdout}{done.stderr}")
    result = json.loads((out / "result.json").read_text())
    fault = result["faults"][0]
    killed = result["clock"]["t0_monotonic"] + fault["injected_at_s"]
    history = map(json.loads, (out / "history.jsonl").read_text().splitlines())
    failed = sum(op["probe"] == "write" and op["outcome"] != "ok" for op in history)
    return Measured(result, vetoed_elections(out / "sandbox", killed), failed)


def run_vcsim(how: VcsimRun, sim: Vcsim, work: Path) -> Measured:
    if how.shared_host:
        return run_other_set(sim, work)
    run = run_catalog(how.topology, sim, work, election_timeout_ms=how.election_timeout_ms,
                      heartbeat_timeout_s=how.heartbeat_timeout_s, boot_s=HA_BOOT_S)  # fmt: skip
    if run.exit_code not in (0, 1) or run.binding_errors:
        sys.exit(f"{how} on vcsim ended {run.exit_code}: {run.output}{run.binding_errors}")
    return Measured(run.result, run.vetoed_elections)


def run_other_set(sim: Vcsim, work: Path) -> Measured:
    """The other shard on vcsim: its write probe's figures, as a result's metrics (no
    failover: it kept its primary), beside the failover of the set the host failure hit."""
    run = run_shared_host(sim, work, boot_s=HA_BOOT_S)
    failed, other = run.failed, run.other
    if failed.exit_code not in (0, 1) or failed.binding_errors or other.binding_errors:
        sys.exit(f"the shared host on vcsim ended {failed.exit_code}: {failed.output}"
                 f"{failed.binding_errors}{other.binding_errors}")  # fmt: skip
    metrics = {"write_unavailable_s": other.write_unavailable_s, "failover_s": None}
    return Measured({"metrics": metrics, "faults": []}, 0, other.failed_writes,
                    beside_failover_s=failed.result["metrics"]["failover_s"])  # fmt: skip


def figure(runs: list[Measured]) -> str:
    """write_unavailable_s (and failover_s when the set failed over): median and range."""
    if not runs:
        return "not run"
    parts = [_spread("writes out", _gaps(runs))]
    failovers = [r.metrics["failover_s"] for r in runs if r.metrics["failover_s"] is not None]
    if failovers:
        parts.append(_spread("failover", failovers))
    ha = [r.ha for r in runs if r.ha and r.ha["back_s"] is not None and not failovers]
    if ha:
        parts.append("HA: detection {} + boot {} + member start {}".format(
            *(f"{_median([p[k] for p in ha]):.1f} s"
              for k in ("detect_s", "boot_s", "member_start_s"))))  # fmt: skip
    beside = [r.beside_failover_s for r in runs if r.beside_failover_s is not None]
    if beside:
        parts.append(_spread("meanwhile the set whose primary shared the host failed over in",
                             beside))  # fmt: skip
        parts.append(f"{sum(r.failed_writes for r in runs)} failed writes")
    return "; ".join(parts)


def _spread(what: str, values: list[float]) -> str:
    if not values:
        return f"{what} 0 s"
    values = sorted(values)
    if len(values) == 1:
        return f"{what} {values[0]:.2f} s"
    return f"{what} {_median(values):.2f} s ({values[0]:.2f}-{values[-1]:.2f}, {len(values)} runs)"


def parse_figure(points: list[Point]) -> str:
    """The heir's degraded period, and its first second as primary against the baseline."""
    if not points:
        return "not run"
    degraded = _spread("degraded", [p.degraded_s for p in points])
    first = _median([p.first_second_p99_ms for p in points])
    base = _median([p.baseline_ms for p in points])
    slowed = _median([float(p.slowed_reads) for p in points])
    return (f"{degraded}; read p99 {first:.0f} ms in its first second, median {base:.1f} ms "
            f"before; {slowed:.0f} reads slowed by the cap")  # fmt: skip


def parse_section(cold: list[Point], warm: list[Point]) -> list[str]:
    """The Parse report's row (cold heir) and its control (warm heir)."""
    if not cold and not warm:
        return []
    per_page = PARSE_SIZE_MB * 1e6 / 16384 / PARSE_IOPS
    return [
        f"## {PARSE}",
        "",
        "| heir | seed | report | rsdrill, sandbox | why they differ |",
        "|---|---|---|---|---|",
        f"| cold (restarted: empty page cache), {PARSE_SIZE_MB:g} MB working set, "
        f"{PARSE_IOPS} read IOPS | `parse-cold-secondary` | about 7 min of 200-400 ms reads "
        f"(provisioned IOPS) | {parse_figure(cold)} | The period is the working set read back "
        f"through the cap: {PARSE_SIZE_MB:g} MB is about {per_page:.0f} s of 16 KiB pages "
        f"at {PARSE_IOPS} IOPS here, where Parse's working set was gigabytes at a few "
        "thousand IOPS; `bench/cold_cache.py` shows it grow with the working set and shrink "
        "as the cap rises (bench/results/cold-cache.txt). |",
        f"| warm (wrote every record while replicating), same set | `parse-cold-secondary` "
        f"without its restart | none | {parse_figure(warm)} | A heir whose cache holds the "
        "working set serves it from memory: the cap slows no read, and any degraded time "
        "left is the hand-over's own under this machine's load. |",
        "",
        "The degraded period runs from the heir's first writable hello until the first 1 s "
        "window of its reads whose median is within 1.5x the median of the 5 s before the "
        "stepdown, at least 10 ms more (`rsdrill.analysis.latency.takeover`). The seed reads "
        "only (YCSB workload C): writes under the cap pause the emulator for its checkpoints "
        "(docs/sandbox.md), so Parse's few write timeouts are not reproduced.",
        "",
    ]


def page(command: str, sandbox: dict[str, list[Measured]], on_vcsim: dict[str, list[Measured]],
         vcsim_version: str, load: float, parse: list[str]) -> str:  # fmt: skip
    lines = [
        "# The published failure reports, reproduced",
        "",
        f"Written by `{command}` on {dt.date.today().isoformat()}: do not edit, rerun it. "
        "Each row is an experiment of `experiments/seeds/`, run through `rsdrill run` on the "
        f"sandbox (rsdrill's emulator members; 2 cores shared with other work, load average "
        f"{load:.1f} at the end); the host failures also through "
        f"vCenter's API on vcsim {vcsim_version} (the catalog's `experiments/vsphere-*.yaml`, "
        "each VM bound to a sandbox member by the test harness and booting for the same "
        f"{HA_BOOT_S:g} s as the sandbox's host). Figures: `write_unavailable_s` (the longest "
        "time without a successful w:1 write) and `failover_s`; for HA's restart its phases "
        "(`faults[0].detail.ha`).",
        "",
        f"## {REPORT}",
        "",
        "| replica set | failure | seed | report | rsdrill, sandbox | rsdrill, vcsim | why they "
        "differ |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        if row.seed not in sandbox:
            continue
        runs = sandbox[row.seed]
        on_sim = figure(on_vcsim[row.seed]) if row.seed in on_vcsim else (
            "not run: a capacity disk failure is invisible to the VM" if row.vcsim is None
            else "not run")  # fmt: skip
        lines.append(f"| {row.replica_set} | {row.failure} | `{row.seed}` | {row.published} | "
                     f"{figure(runs)} | {on_sim} | {row.why(runs)} |")  # fmt: skip
    lines += [
        "",
        "HA's restart is a model with two inputs, each phase of it measured in the result: "
        f"`detect` ({HA_DETECT_S:g} s: vSphere HA declares a host failed after 15 s without "
        "its heartbeats and pings, VMware's documented figure) and `boot` "
        f"({HA_BOOT_S:g} s: an assumption, VMware documents no guest boot time); the member's "
        "start and recovery are measured, never modelled. See docs/platforms/vsphere.md.",
        "",
        "The report's rs=3 row interrupted only the shard whose primary was on the failed "
        "host. A seed runs one replica set: the host-failure rows are that shard, the "
        "other-shard row a set that had only its secondary there. On vcsim the other-shard "
        "row is one power-off of a host holding both: the first set's primary and the second "
        "set's secondary, the second set's writes measured by rsdrill's write probe.",
        "",
        "The capacity disk rows keep each member's data on two copies (`target.sandbox.mirror`, "
        "faultfs writing both, reading from one in sync) and fail copy a of the primary's "
        "data with EIO on every operation for 20 s (`disk-fault` with `replica: a`); their "
        "FTT=0 controls fail the only copy the same way and fail their SLO on purpose. See "
        "docs/storage-faults.md.",
        "",
        *parse,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each seed")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--only", action="append", help="this seed only (repeatable)")
    parser.add_argument("--no-vcsim", action="store_true", help="the sandbox only")
    parser.add_argument("--no-parse", action="store_true", help="without the Parse seed")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "seeds.md")
    args = parser.parse_args()
    rows = [r for r in ROWS if not args.only or r.seed in args.only]
    sandbox: dict[str, list[Measured]] = {r.seed: [] for r in rows}
    on_vcsim: dict[str, list[Measured]] = {}
    with tempfile.TemporaryDirectory(prefix="rsdrill-seeds-") as tmp:
        work = Path(tmp)
        simulator = nullcontext(None) if args.no_vcsim else vcsim(work / "vcsim.log")
        # The vcsim runs one at a time: a host failure powers off every VM on the ESXi host,
        # another run's too.
        with simulator as sim, ThreadPoolExecutor(args.jobs) as pool, \
                ThreadPoolExecutor(1) as on_sim:  # fmt: skip
            jobs = []
            for i in range(args.runs):
                for row in rows:
                    where = work / f"{row.seed}-{i}"
                    jobs.append((row.seed, sandbox, pool.submit(run_seed, row.seed, where)))
                    if row.vcsim is not None and sim is not None:
                        simulated = on_sim.submit(run_vcsim, row.vcsim, sim, where / "vcsim")
                        jobs.append((row.seed, on_vcsim, simulated))
            # In this thread, between the others' runs: a run in-process installs signal
            # handlers, which only the main thread may.
            cold, warm = [], []
            parse = not args.no_parse and (not args.only or PARSE_SEED in args.only)
            for i in range(args.runs if parse else 0):
                for heir, into in (("cold", cold), ("warm", warm)):
                    into.append(
                        measure_takeover(
                            work / f"parse-{heir}-{i}",
                            f"parse-{heir}",
                            PARSE_SIZE_MB,
                            PARSE_IOPS,
                            cold=heir == "cold",
                        )
                    )
                    print(f"parse-cold-secondary, {heir} heir: {parse_figure(into[-1:])}",
                          flush=True)  # fmt: skip
            for seed, into, job in jobs:
                measured = job.result()
                into.setdefault(seed, []).append(measured)
                print(f"{seed} on {'the sandbox' if into is sandbox else 'vcsim'}: "
                      f"{figure([measured])}; vetoed {measured.vetoed}", flush=True)  # fmt: skip
    version = (ROOT / ".cache" / "tools" / "vcsim.version").read_text().strip()
    command = " ".join(["python bench/seeds.py", *sys.argv[1:]])
    args.out.write_text(
        page(command, sandbox, on_vcsim, version, os.getloadavg()[0], parse_section(cold, warm))
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
