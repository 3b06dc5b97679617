"""How far the sandbox behaves as mongod, judged by MongoDB's own specification tests.

Runs suites of pymongo's own test harness, unmodified, from the source distribution of the
installed pymongo (downloaded once with `pip download --no-binary`), against a fresh sandbox,
and prints per suite: collected, ran, passed, failed, skipped (with why), and the most common
causes of failure. Writes the same as JSON.

    python bench/spec_conformance.py [--topology rs3|sharded] [--suites crud,retryable_writes]
                                     [--out conformance.json] [--jobs 2] [--auth]
                                     [--expect FILE] [--write-expected FILE] [--split K/N]

With `--expect FILE` (one test id a line, as `--write-expected` records the passing ones), a
listed test that does not pass is run once more; one that fails again is a regression (printed
with its failure, exit status 1), one that passes then is reported as flaky.

With `--split K/N`, each suite runs only part K of its tests (bench/plugins/spec_split.py: by a
hash of the test's id), and only the expected tests of that part are expected: N runs at once
(the conformance tests of one long suite, on parallel workers) together run it all.

Needs network access to PyPI once (the sdist is cached under .cache/pymongo-sdist) and the
`pytest-asyncio` plugin pymongo's test configuration names (in rsdrill's dev extra).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pymongo
from plugins.spec_split import ENV as SPLIT_ENV
from plugins.spec_split import parse as parse_split
from plugins.spec_split import part_of

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "pymongo-sdist"
SUITES = {
    "crud": "test/test_crud_unified.py",
    "retryable_writes": "test/test_retryable_writes_unified.py",
    "retryable_reads": "test/test_retryable_reads_unified.py",
    "transactions": "test/test_transactions_unified.py",
    "sessions": "test/test_sessions_unified.py",
    "causal_consistency": "test/test_causal_consistency.py",
    # SDAM: the unified and integration tests that run against a live server (the file's
    # unit tests of pymongo's own topology logic pass without one).
    "sdam": "test/test_discovery_and_monitoring.py",
    "sdam_monitoring": "test/test_sdam_monitoring_spec.py",
    "streaming_protocol": "test/test_streaming_protocol.py",
    "heartbeat_monitoring": "test/test_heartbeat_monitoring.py",
    "survive_stepdown": "test/test_connections_survive_primary_stepdown_spec.py",
    "server_selection": "test/test_server_selection_in_window.py",
    "change_streams": "test/test_change_stream.py",
    # Connection pools (CMAP: pool cleared on a network error or a state change), client-side
    # operation timeouts (CSOT: blockConnection, maxTimeMS), read/write concern handling.
    "connection_monitoring": "test/test_connection_monitoring.py",
    "csot": "test/test_csot.py",
    "read_write_concern": "test/test_read_write_concern_spec.py",
    "command_monitoring": "test/test_command_monitoring.py",
    "retryable_writes_prose": "test/test_retryable_writes.py",
}
SUITE_TIMEOUT_S = 1200
# Ports each suite's sandbox takes: a replica set's members, or a sharded cluster's config
# servers, two shards of three and two routers.
SPAN = {"rs1": 3, "rs3": 3, "standalone": 3, "sharded": 3 + 2 * 3 + 2}
TEST_TIMEOUT_S = 60


@dataclass
class SuiteResult:
    suite: str
    collected: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    skip_reasons: dict[str, int] = field(default_factory=dict)
    causes: dict[str, int] = field(default_factory=dict)
    # Failed test id → its failure's first line.
    failures: dict[str, str] = field(default_factory=dict)
    passes: list[str] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return self.passed + self.failed

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.ran if self.ran else None


def sdist(version: str) -> Path:
    """pymongo's source tree for `version`, downloaded and unpacked once. Runs at the same time
    (the conformance tests on two workers of a fresh clone) take turns: the second finds the
    tree the first unpacked, instead of unpacking over it ("File exists")."""
    root = CACHE / f"pymongo-{version}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "test" / "__init__.py").exists():
            return root
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             f"pymongo=={version}", "-d", str(CACHE), "-q"],
            check=True,
        )  # fmt: skip
        with tarfile.open(CACHE / f"pymongo-{version}.tar.gz") as archive:
            archive.extractall(CACHE, filter="data")
    return root


def run_suite(
    name: str, source: Path, host: str, port: int, work: Path, tests: list[str] | None = None,
    login: dict[str, str] | None = None,
) -> SuiteResult:  # fmt: skip
    """One suite with pymongo's harness (its own conftest and configuration); `tests` (node
    ids) runs only those; `login` (DB_USER, DB_PASSWORD): the user the harness logs in as."""
    report = work / f"{name}.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", *(tests or [SUITES[name]]), "-q", "-p",
         "no:cacheprovider",
         "-o", "addopts=", f"--junitxml={report}", "-m", "default or default_async",
         # A test waiting for an event the sandbox never produces fails instead of hanging.
         f"--timeout={TEST_TIMEOUT_S}",
         # --split's filter (a no-op unless RSDRILL_SPEC_SPLIT is set)
         "-p", "spec_split"],
        cwd=source, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S,
        # Bytecode written even where the caller turned it off (PYTHONDONTWRITEBYTECODE, as on
        # CI): pymongo's harness modules, assert-rewritten by pytest, are then cached under
        # CACHE instead of rewritten by each suite a test session runs (~1.2 s of CPU each).
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
             "DB_IP": host, "DB_PORT": str(port),
             "PYTHONPATH": os.pathsep.join([str(source), str(REPO / "bench" / "plugins")]),
             **(login or {})},
    )  # fmt: skip
    return parse_junit(name, report)


_VOLATILE = re.compile(r"0x[0-9a-f]+|\b\d+\b|ObjectId\('[0-9a-f]+'\)|'[^']{40,}'")


def node_id(test: str) -> str:
    """`test.test_crud_unified.TestX.test_y` (a junit id) → pytest's node id."""
    module, cls, name = test.rsplit(".", 2)
    return f"{module.replace('.', '/')}.py::{cls}::{name}"


def cause_of(message: str) -> str:
    """A failure message reduced to its kind: the first line, numbers and ids blanked."""
    first = next((line.strip() for line in message.splitlines() if line.strip()), "")
    first = re.sub(r"full error: .*", "", first)
    return _VOLATILE.sub("…", first)[:160]


def parse_junit(name: str, report: Path) -> SuiteResult:
    result = SuiteResult(name)
    if not report.exists():
        result.causes["the suite did not run (no report)"] = 1
        return result
    skips: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        result.collected += 1
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            result.failed += 1
            cause = cause_of(failure.get("message") or failure.text or "")
            causes[cause] += 1
            result.failures[f"{case.get('classname')}.{case.get('name')}"] = cause
        elif skipped is not None:
            result.skipped += 1
            skips[(skipped.get("message") or "")[:120]] += 1
        else:
            result.passed += 1
            result.passes.append(f"{case.get('classname')}.{case.get('name')}")
    result.skip_reasons = dict(skips.most_common())
    result.causes = dict(causes.most_common())
    return result


def run_on_own_sandbox(
    name: str, source: Path, topology: str, port_base: int, work: Path,
    tests: list[str] | None = None, auth: bool = False,
) -> SuiteResult:  # fmt: skip
    """A suite against a sandbox of its own: fail points are per server, and one suite's must
    not fire in another's tests. `auth`: the sandbox requires a login (its root user)."""
    from rsdrill.sandbox.cluster import Sandbox, choose_engine, up
    from rsdrill.sandbox.config import build_topology

    if topology == "sharded":
        return _run_on_sharded(name, source, port_base, work, tests)
    engine, _ = choose_engine("emulator")
    directory = work / f"sandbox-{name}"
    sandbox = up(directory, build_topology(topology, port_base=port_base), engine, auth=auth)
    login = None
    if sandbox.credentials is not None:
        login = {"DB_USER": sandbox.credentials.user, "DB_PASSWORD": sandbox.credentials.password}
    try:
        address, port = sandbox.spec.members[0].host.rsplit(":", 1)
        return run_suite(name, source, address, int(port), work, tests, login)
    finally:
        Sandbox(directory).down(grace_s=2.0)


def _run_on_sharded(
    name: str, source: Path, port_base: int, work: Path, tests: list[str] | None
) -> SuiteResult:
    """A suite against a sharded sandbox of its own, through its first router: pymongo's
    harness finds the second on the next port, as its `useMultipleMongoses` tests want."""
    from rsdrill.sandbox.sharded import up_sharded

    cluster = up_sharded(work / f"sharded-{name}", port_base=port_base)
    try:
        address, port = cluster.spec.routers[0].rsplit(":", 1)
        return run_suite(name, source, address, int(port), work, tests)
    finally:
        cluster.down(grace_s=2.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topology", default="rs3",
                        choices=["rs1", "rs3", "standalone", "sharded"])  # fmt: skip
    parser.add_argument("--suites", default=",".join(SUITES))
    parser.add_argument("--port-base", type=int, default=29500)
    parser.add_argument("--auth", action="store_true", help="sandboxes that require a login")
    parser.add_argument("--jobs", type=int, default=2, help="suites run at once")
    parser.add_argument("--out", type=Path, default=Path("conformance.json"))
    parser.add_argument("--expect", type=Path, help="tests that must pass (one id a line)")
    parser.add_argument("--write-expected", type=Path, help="record the passing tests here")
    parser.add_argument("--split", help="K/N: run part K of N of each suite's tests")
    args = parser.parse_args()
    split = None
    if args.split is not None:
        try:
            split = parse_split(args.split)
        except ValueError:
            parser.error(f"--split {args.split}: give K/N, 1 <= K <= N")
        if args.write_expected is not None:
            parser.error("--write-expected records every passing test: not with --split")
        os.environ[SPLIT_ENV] = args.split
    names = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [s for s in names if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}; choose from {', '.join(SUITES)}")
    source = sdist(pymongo.version)
    with tempfile.TemporaryDirectory(prefix="rsdrill-conformance-") as scratch:
        work = Path(scratch)
        with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
            results = list(pool.map(
                lambda i_n: run_on_own_sandbox(i_n[1], source, args.topology,
                                               args.port_base + SPAN[args.topology] * i_n[0],
                                               work,
                                               auth=args.auth),
                enumerate(names),
            ))  # fmt: skip
        regressed: dict[str, str] = {}
        flaky: list[str] = []
        if args.expect is not None:
            expected = {t.strip() for t in args.expect.read_text().splitlines() if t.strip()}
            if split is not None:
                part, parts = split
                expected = {t for t in expected if part_of(node_id(t), parts) == part}
            passing = {t for r in results for t in r.passes}
            failed = {t: c for r in results for t, c in r.failures.items()}
            missing = sorted(expected - passing)
            if missing:  # once more, alone: a test that passes now was flaky, not broken
                again = run_on_own_sandbox("rerun", source, args.topology, args.port_base,
                                           work, [node_id(t) for t in missing],
                                           auth=args.auth)  # fmt: skip
                flaky = sorted(set(missing) & set(again.passes))
                regressed = {t: failed.get(t, "not run") for t in missing if t not in flaky}
    print(f"pymongo {pymongo.version} spec tests against the sandbox ({args.topology})\n")
    print(f"{'suite':<20} {'collected':>9} {'ran':>5} {'passed':>6} {'failed':>6} "
          f"{'skipped':>7} {'pass %':>7}")  # fmt: skip
    for r in results:
        rate = f"{100 * r.pass_rate:.1f}" if r.pass_rate is not None else "-"
        print(f"{r.suite:<20} {r.collected:>9} {r.ran:>5} {r.passed:>6} {r.failed:>6} "
              f"{r.skipped:>7} {rate:>7}")  # fmt: skip
    for r in results:
        if r.causes:
            print(f"\n{r.suite}: causes of failure")
            for cause, count in list(r.causes.items())[:15]:
                print(f"  {count:>4}  {cause}")
        if r.skip_reasons:
            print(f"{r.suite}: skipped because")
            for reason, count in list(r.skip_reasons.items())[:8]:
                print(f"  {count:>4}  {reason}")
    summary = {
        "pymongo": pymongo.version,
        "topology": args.topology,
        "suites": [{**asdict(r), "ran": r.ran, "pass_rate": r.pass_rate} for r in results],
        "regressed": regressed,
        "flaky": flaky,
    }
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nsummary: {args.out}")
    passing = sorted(t for r in results for t in r.passes)
    if args.write_expected is not None:
        args.write_expected.write_text("".join(f"{t}\n" for t in passing))
        print(f"expected passes: {args.write_expected} ({len(passing)})")
    if args.expect is not None:
        print(f"regressions: {len(regressed)}, flaky (passed when run again): {len(flaky)}")
        for test in flaky:
            print(f"  FLAKY {test}")
        for test, cause in regressed.items():
            print(f"  REGRESSED {test}: {cause}")
        if regressed:
            sys.exit(1)


if __name__ == "__main__":
    main()
