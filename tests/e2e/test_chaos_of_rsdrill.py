"""Chaos for rsdrill itself: `rsdrill run` killed (SIGKILL) or interrupted (SIGINT) at random
moments of short sandbox experiments, and nothing may be left behind.

Each iteration is its own run: its own sandbox (ports from `free_port_base`), out dir and
RSDRILL_HOME, so iterations run a few at a time in threads. The moment is drawn (seeded) as a
phase of the run plus a random delay after the line that announces it, so every phase is hit:

- setup: after `phase: setup` (the sandbox is being built), 0-3 s;
- steady: after `phase: faults` (probes running, nothing injected yet), 0-0.9 s;
- injected: after `injected` (the fault is in force), 0-1.4 s;
- reverting: after `injected`, the fault's duration plus 0-0.6 s (the revert is under way);
- observing: after `phase: observe`, 0-1.4 s;
- teardown (SIGKILL only): after `phase: revert` (analysis, stopping the sandbox), 0-0.2 s: a
  run that keeps its sandbox is gone about 0.25 s after that line on an idle 2-core machine, so
  a later signal would find no run to kill.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pymongo import MongoClient
from pymongo.errors import NotPrimaryError, OperationFailure

from rsdrill.faultfs.mount import faultfs_mounts
from rsdrill.platforms.machine import netcls
from rsdrill.platforms.machine.cgroup import mount_of
from rsdrill.platforms.machine.degrade import PROXY_MODULE
from rsdrill.platforms.machine.disk_fill import small_disk_mounts
from rsdrill.platforms.machine.network import rsdrill_tables
from rsdrill.sandbox.cluster import Sandbox
from tests.harness.cli import Rsdrill, rsdrill_run
from tests.integration.faultfs_support import ensure_faultfs_tools

FAULTS = {
    "host-kill-keep": "{at: 1s, kind: host-kill, select: primary, duration: 1.5s}",
    "host-kill-wipe": "{at: 1s, kind: host-kill, select: secondary, duration: 1.5s,"
    " restart: {volume: wipe}}",
    # Restarted as HA would: the host back after detection, booting while a kill lands.
    "host-kill-ha": "{at: 1s, kind: host-kill, select: primary,"
    " restart: {model: ha, detect: 1.5s, boot: 0.5s}}",
    "host-freeze": "{at: 1s, kind: host-freeze, select: primary, duration: 1.5s}",
    "stepdown": "{at: 1s, kind: stepdown, select: primary, duration: 1.5s, secondary_catch_up: 1s}",
    "network-partition": "{at: 1s, kind: network-partition, select: primary, duration: 1.5s}",
    "network-degrade": "{at: 1s, kind: network-degrade, select: primary, latency: 20ms,"
    " duration: 1.5s}",
    "partition-flapping": "{at: 1s, kind: network-partition, select: primary, shape: bridge,"
    " flapping: 0.5s, duration: 1.5s}",
    # The primary dies of a failed journal fsync and is restarted on revert; members on faultfs.
    "disk-fault": "{at: 1s, kind: disk-fault, select: primary, operations: [fsync],"
    " duration: 1.5s}",
    "iops-throttle": "{at: 1s, kind: iops-throttle, select: primary, write_iops: 50,"
    " duration: 1.5s}",
    "volume-detach": "{at: 1s, kind: volume-detach, select: secondary, duration: 1.5s}",
    "power-loss": "{at: 1s, kind: host-kill, select: primary, power_loss: true, duration: 1.5s}",
    # A secondary's host and data lost; the restore step starts it empty (initial sync).
    "data-loss": "{at: 1s, kind: data-loss, select: secondary, one_way: true}",
    # The primary's inserts fail; a kept sandbox must take inserts again afterwards.
    "mongodb-fail-command": "{at: 1s, kind: mongodb-fail-command, select: primary,"
    " commands: [insert], error_code: 8, duration: 1.5s}",
    "cpu-starve": "{at: 1s, kind: cpu-starve, select: primary, cpu_share: 0.02, duration: 1.5s}",
    # The OOM killer takes the primary; revert restarts it.
    "memory-pressure": "{at: 1s, kind: memory-pressure, select: primary, duration: 1.5s}",
    "clock-skew": "{at: 1s, kind: clock-skew, select: primary, clock_offset: 3600, duration: 1.5s}",
    # The primary dies of ENOSPC on its own small disk; revert frees it and restarts it.
    "disk-fill": "{at: 1s, kind: disk-fill, select: primary, duration: 1.5s}",
}
# What a fault needs besides itself in its experiment.
EXTRA = {
    "data-loss": "steps:\n  - {at: 2.5s, name: restore, marks: restore, run: 'for p in"
    ' "$RSDRILL_SANDBOX"/members/*; do rsdrill sandbox start --dir "$RSDRILL_SANDBOX"'
    """ "$(basename "$p")" >/dev/null 2>&1; done; true'}\n""",
}
# Faults whose sandbox is never kept: members on faultfs for the run only, or data lost.
NOT_KEPT = {"disk-fault", "iops-throttle", "volume-detach", "power-loss", "data-loss",
            "disk-fill"}  # fmt: skip
FAULT_S = 1.5
# (marker line, lowest delay, highest delay) per phase; see the module docstring.
PHASES: dict[str, tuple[str, float, float]] = {
    "setup": ("phase: setup", 0.0, 3.0),
    "steady": ("phase: faults", 0.0, 0.9),
    "injected": ("injected", 0.0, 1.4),
    "reverting": ("injected", FAULT_S, FAULT_S + 0.6),
    "observing": ("phase: observe", 0.0, 1.4),
    "teardown": ("phase: revert", 0.0, 0.2),
}
# Every kind killed while in force (2 x 18 runs), then every other phase once; the
# suite's 20 minutes allow no more (50 runs took 270 s of one worker).
SIGKILL_RUNS = 40
SIGINT_RUNS = 20
# Signals that must land inside a run (a loaded machine may deliver a few after its end).
SIGINT_LANDED = 17
PARALLEL = 4
HEALTHY_TIMEOUT_S = 45.0

pytestmark = pytest.mark.timeout(600)
NETFILTER = Path(__file__).resolve().parents[2] / ".ci" / "install-netfilter"


@pytest.fixture(scope="module", autouse=True)
def nft() -> None:
    """network-partition runs need `nft`; installed by the project's script when missing."""
    if shutil.which("nft") is None:
        subprocess.run([str(NETFILTER)], check=True, timeout=300)
    assert shutil.which("nft"), f"{NETFILTER} did not install nft"


@pytest.fixture(scope="module", autouse=True)
def fuse() -> None:
    """disk-fault runs put the members on faultfs: libfuse3 and mfusepy, installed if missing."""
    ensure_faultfs_tools()


@dataclass
class Case:
    """One run of rsdrill to disturb."""

    index: int
    fault: str
    keep: bool
    phase: str
    delay_s: float
    port_base: int


@dataclass
class Outcome:
    case: Case
    work: Path
    returncode: int | None = None
    output: str = ""
    signalled: bool = False  # the signal reached a live `rsdrill run`
    # The run had built its kept sandbox (read from its journal before any `rsdrill recover`,
    # which writes the same `released` record when it stops a half-built one).
    kept: bool = False
    # SIGINT after the run had written its verdict (the signal found nothing to abort).
    late: bool = False
    problems: list[str] = field(default_factory=list)


# The phases in which the fault itself is in force: every kind is killed in each of them first.
IN_FORCE = ("injected", "reverting")


def _cases(
    seed: int,
    count: int,
    phases: list[str],
    ports: Callable[[int], int],
    *,
    in_force_first: bool = False,
) -> list[Case]:
    """`count` runs cycling through every fault kind and phase, delays and `keep` drawn. With
    `in_force_first`, every kind is first disturbed while it is in force (IN_FORCE), then the
    other phases take the rest in turn."""
    rng = random.Random(seed)
    faults = list(FAULTS)
    pairs: list[tuple[str, str]] = []
    if in_force_first:
        pairs = [(f, p) for f in faults for p in phases if p in IN_FORCE]
        phases = [p for p in phases if p not in IN_FORCE]
    # Every (phase, fault) pair once before any repeats, whatever the two counts.
    period = math.lcm(len(phases), len(faults))
    pairs += [(faults[(i + i // period) % len(faults)], phases[i % len(phases)])
              for i in range(max(count - len(pairs), 0))]  # fmt: skip
    cases = []
    for i, (fault, phase) in enumerate(pairs[:count]):
        _, low, high = PHASES[phase]
        keep = rng.random() < 0.5 and fault not in NOT_KEPT
        cases.append(Case(i, fault, keep, phase, rng.uniform(low, high), ports(3)))
    return cases


def _experiment(case: Case, work: Path) -> Path:
    path = work / "exp.yaml"
    path.write_text(
        f"name: chaos-{case.fault}\n"
        "target: {platform: sandbox, topology: rs3, election_timeout: 1s, "
        f"keep: {str(case.keep).lower()}, port_base: {case.port_base}}}\n"
        "probes:\n  availability: {interval: 50ms, timeout: 250ms}\n"
        f"faults:\n  - {FAULTS[case.fault]}\n"
        + EXTRA.get(case.fault, "")
        + "observe: {after_revert: 1.5s}\n"
    )
    return path


def _env(work: Path) -> dict[str, str]:
    return {**os.environ, "RSDRILL_HOME": str(work / "home")}


def _rsdrill(work: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return rsdrill_run(
        [*args],
        capture_output=True, text=True, timeout=timeout, env=_env(work),
    )  # fmt: skip


def _disturb(case: Case, work: Path, sig: signal.Signals) -> Outcome:
    """Start the run, send `sig` at the case's moment, wait for the process to end."""
    work.mkdir(parents=True)
    outcome = Outcome(case, work)
    proc = Rsdrill(
        ["run", str(_experiment(case, work)),
         "--out", str(work / "out"), "--no-live", "--no-history"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(work),
    )  # fmt: skip
    marker = PHASES[case.phase][0]
    seen = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not seen.wait(0.05):
        if proc.poll() is not None or time.monotonic() > deadline:
            break
    if seen.is_set():
        time.sleep(case.delay_s)
        if proc.poll() is None:
            proc.send_signal(sig)
            outcome.signalled = True
    else:
        proc.kill()
        outcome.problems.append(f"never saw {marker!r}")
    try:
        outcome.returncode = proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        outcome.returncode = proc.wait()
        outcome.problems.append(f"still running 90 s after {sig.name}")
    reader.join(10)
    outcome.output = "".join(lines)
    outcome.kept = case.keep and _setup_finished(work)
    return outcome


def _processes_of(directory: Path) -> dict[int, str]:
    """Every process whose command line names `directory` (a sandbox member), with its state.

    Found from /proc rather than pid files: a member started just before the kill may not have
    one yet.
    """
    found = {}
    needle = str(directory).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        state = stat.rsplit(")", 1)[1].split()[0]
        if needle in cmdline.split(b"\0") and state not in ("Z", "X"):
            found[int(proc.name)] = state
    return found


def _faultfs_daemons(sandbox_dir: Path) -> list[int]:
    """faultfs daemons serving a member of this sandbox. Once unmounted a daemon exits as soon
    as the last file it serves is closed, so they get a moment to go."""
    needle = str(sandbox_dir).encode()
    deadline = time.monotonic() + 5
    while True:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                args = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
            except OSError:
                continue
            if b"rsdrill.faultfs" in args and any(a.startswith(needle) for a in args):
                found.append(int(proc.name))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _degrade_proxies(ports: set[int]) -> list[int]:
    """network-degrade proxies forwarding to one of `ports` (their config names them)."""
    needles = [f'"upstream_port": {p}'.encode() for p in ports]
    found = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if PROXY_MODULE.encode() in args and any(n in args for n in needles):
            found.append(int(proc.name))
    return found


def _setup_finished(work: Path) -> bool:
    """Whether the run's journal says its sandbox was fully built (and is then kept)."""
    for path in (work / "home" / "journal").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("type") == "released" and record.get("key") == "resource:target":
                return True
    return False


def _check_nothing_remains(outcome: Outcome) -> None:
    """No member frozen, no partition rule or member class left for the run's ports, no faultfs
    mount or daemon left; a kept sandbox healthy with one primary, any other one gone."""
    ports = {outcome.case.port_base + i for i in range(3)}
    tables = [t for t in rsdrill_tables() if t.startswith(tuple(f"rsdrill-{p}-" for p in ports))]
    if tables:
        outcome.problems.append(f"network rules left: {tables}")
    if tagged := ports & set(netcls.tagged_ports()):
        outcome.problems.append(f"member processes left in net_cls classes: ports {tagged}")
    if groups := _member_cgroups(ports):
        outcome.problems.append(f"cpu/memory cgroups left: {groups}")
    if disks := small_disk_mounts(outcome.work):
        outcome.problems.append(f"member disks left mounted: {disks}")
    if proxies := _degrade_proxies(ports):
        outcome.problems.append(f"network-degrade proxies left: {proxies}")
    if mounts := faultfs_mounts(outcome.work):
        outcome.problems.append(f"faultfs mounts left: {mounts}")
    sandbox_dir = outcome.work / "out" / "sandbox"
    if daemons := _faultfs_daemons(sandbox_dir):
        outcome.problems.append(f"faultfs daemons left: {daemons}")
    processes = _processes_of(sandbox_dir)
    stopped = [pid for pid, state in processes.items() if state == "T"]
    if stopped:
        outcome.problems.append(f"member processes left stopped: {stopped}")
    if not outcome.kept:
        if processes:
            outcome.problems.append(f"member processes left running: {processes}")
        return
    sandbox = Sandbox(sandbox_dir)
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    while True:
        states = [s.state for s in sandbox.status()]
        if sorted(states) == ["PRIMARY", "SECONDARY", "SECONDARY"]:
            if (code := _insert_fails(sandbox)) is not None:
                outcome.problems.append(f"kept sandbox refuses inserts (code {code}): a fail "
                                        "point left on")  # fmt: skip
            if _clock_skewed(sandbox):
                outcome.problems.append("kept sandbox's primary clock still skewed")
            return
        if time.monotonic() > deadline:
            outcome.problems.append(f"kept sandbox not healthy: {states}")
            return
        time.sleep(0.2)


def _member_cgroups(ports: set[int]) -> list[Path]:
    """cpu-starve and memory-pressure cgroups (rsdrill-<port>) of these members."""
    names = {f"rsdrill-{port}" for port in ports}
    return [path for controller in ("cpu", "memory")
            for path in mount_of(controller).rglob("rsdrill-*") if path.name in names]  # fmt: skip


def _clock_skewed(sandbox: Sandbox) -> bool:
    """Whether a kept member's clock is still off (clock-skew not reverted)."""
    with MongoClient(sandbox.uri, serverSelectionTimeoutMS=10_000) as client:
        local = client.admin.command("hello")["localTime"].replace(tzinfo=dt.UTC)
    return abs((local - dt.datetime.now(dt.UTC)).total_seconds()) > 60


# An election the fault set going (a degraded or cut link) may still step the primary down as
# the set turns healthy: these codes say so, a fail point left on keeps failing after it.
_ELECTION_CODES = {189, 10107, 11602, 13435, 11600, 91}


def _insert_fails(sandbox: Sandbox) -> int | None:
    """The error code of an insert on the kept sandbox's primary (None: it succeeded), tried
    again through an election for up to HEALTHY_TIMEOUT_S."""
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    with MongoClient(sandbox.uri, serverSelectionTimeoutMS=10_000, retryWrites=False) as client:
        while True:
            try:
                client.rsdrill_chaos.after.insert_one({})
                return None
            except NotPrimaryError:
                code = 10107
            except OperationFailure as exc:
                if exc.code not in _ELECTION_CODES:
                    return exc.code
                code = exc.code
            if time.monotonic() > deadline:
                return code
            time.sleep(0.2)


def _clean_up(work: Path) -> None:
    sandbox_dir = work / "out" / "sandbox"
    if (sandbox_dir / "members").exists():
        Sandbox(sandbox_dir).down(grace_s=1.0)
    for pid in _processes_of(sandbox_dir):
        os.kill(pid, signal.SIGKILL)


def _run_all(
    cases: list[Case], tmp_path: Path, one: Callable[[Case, Path], Outcome]
) -> list[Outcome]:
    def guarded(case: Case) -> Outcome:
        work = tmp_path / f"run{case.index}"
        try:
            return one(case, work)
        finally:
            _clean_up(work)

    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(guarded, cases))


def _report(outcomes: list[Outcome]) -> str:
    return "\n\n".join(
        f"#{o.case.index} {o.case} exit {o.returncode}: {'; '.join(o.problems)}\n{o.output}"
        for o in outcomes
        if o.problems
    )


@pytest.mark.slow
def test_sigkill_at_random_moments_then_recover_leaves_nothing(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    def one(case: Case, work: Path) -> Outcome:
        outcome = _disturb(case, work, signal.SIGKILL)
        done = _rsdrill(work, "recover")
        if done.returncode != 0:
            outcome.problems.append(f"recover exited {done.returncode}: {done.stdout}{done.stderr}")
        _check_nothing_remains(outcome)
        again = _rsdrill(work, "recover")
        if not again.stdout.startswith("nothing to recover"):
            outcome.problems.append(f"second recover: {again.stdout}{again.stderr}")
        return outcome

    cases = _cases(9, SIGKILL_RUNS, list(PHASES), free_port_base, in_force_first=True)
    outcomes = _run_all(cases, tmp_path, one)
    assert not any(o.problems for o in outcomes), _report(outcomes)
    assert sum(o.signalled for o in outcomes) >= SIGKILL_RUNS - 2, _report(outcomes)


@pytest.mark.slow
def test_sigint_at_random_moments_aborts_and_leaves_nothing(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    """Exit 3 and, since the signal comes after `phase: setup` (the runner is in charge and
    writes result.json however it ends), result.json with verdict aborted; without recover."""

    def one(case: Case, work: Path) -> Outcome:
        outcome = _disturb(case, work, signal.SIGINT)
        if not outcome.signalled:
            outcome.problems.append("the run ended before the signal")
            return outcome
        result_path = work / "out" / "result.json"
        if "SIGINT: stopping" not in outcome.output and result_path.exists():
            # The signal landed after the run had written its verdict: nothing to abort.
            outcome.late = json.loads(result_path.read_text())["verdict"] in ("pass", "fail")
            if outcome.late:
                _check_nothing_remains(outcome)
                return outcome
        if outcome.returncode != 3:
            outcome.problems.append(f"exit {outcome.returncode}, not 3")
        if "Traceback" in outcome.output:
            outcome.problems.append("traceback in the output")
        result_path = work / "out" / "result.json"
        if not result_path.exists():
            outcome.problems.append("no result.json")
        elif (verdict := json.loads(result_path.read_text())["verdict"]) != "aborted":
            outcome.problems.append(f"verdict {verdict}")
        _check_nothing_remains(outcome)
        again = _rsdrill(work, "recover")
        if not again.stdout.startswith("nothing to recover"):
            outcome.problems.append(f"recover found something: {again.stdout}{again.stderr}")
        return outcome

    phases = [p for p in PHASES if p != "teardown"]
    cases = _cases(3, SIGINT_RUNS, phases, free_port_base)
    outcomes = _run_all(cases, tmp_path, one)
    assert not any(o.problems for o in outcomes), _report(outcomes)
    assert sum(not o.late for o in outcomes) >= SIGINT_LANDED, _report(outcomes)
