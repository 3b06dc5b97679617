"""Fixtures shared by the suite: free ports, sandbox directories that are always torn down, emulator
replica sets and short-timeout clients."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from xdist.scheduler import LoadFileScheduling

from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology

# Below Linux's ephemeral range (32768+): a port found free here cannot be taken meanwhile by the
# source port of some client connection before the member process binds it. Each xdist worker
# gets a slice of its own, for its tests and (RSDRILL_PORT_RANGE) the sandboxes its runs build:
# a killed member's port is free for the length of the outage, and a test on another worker
# once started a sandbox on it, so a probe wrote to a stranger.
# RSDRILL_TEST_PORT_RANGE (LOW-HIGH, default 20000-32000) keeps whole test runs sharing a machine
# apart in the same way.
_RANGE_LOW, _RANGE_HIGH = (
    int(p) for p in os.environ.get("RSDRILL_TEST_PORT_RANGE", "20000-32000").split("-")
)
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_WORKERS = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), 1)
_SLICE = (_RANGE_HIGH - _RANGE_LOW) // _WORKERS
_PORT_LOW = _RANGE_LOW + _WORKER * _SLICE
_PORT_HIGH = _PORT_LOW + _SLICE
os.environ["RSDRILL_PORT_RANGE"] = f"{_PORT_LOW}-{_PORT_HIGH}"
# The docs' own sandbox ports (tests/integration/test_docs.py runs their commands as written):
# the README's replica set, and docs/sharding.md's cluster of 3 + 2 x 3 members and 2 routers.
_handed_out: set[int] = set(range(28017, 28017 + 11))

# Scratch files in memory (its pytest_configure); `disk_tmp_path` for tests that need a disk.
# An rsdrill home of the suite's own, not the user's ~/.rsdrill.
pytest_plugins = ["tests.harness.scratch", "tests.harness.home"]

TESTS = Path(__file__).resolve().parent
KUBERNETES = TESTS / "kubernetes"
KUBERNETES_UNIT = "tests/kubernetes"  # as xdist's node ids name it (from the rootdir)
# The quick tier (`pytest -m quick`, under a minute on 2 cores): every unit test, and the
# integration tests that start no member process.
QUICK = ("unit", "emulator/unit", "integration/test_platform_plugins.py",
         "integration/test_cli_startup.py")  # fmt: skip


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: three workers per two cores. A test spends most of its time waiting on
    member processes, elections and timeouts (a sandbox run takes about a quarter of a core),
    so a worker per core left the cores idle a third of the time; two per core starved the
    runs whose fault times are checked to 50 ms (tests/e2e/test_replay.py missed by 11 and
    27 ms). Nor do four make the suite shorter: with three the CPU idled 23 % of the tests'
    time, with four 8 %, and pytest took 1,341 s against 1,357 s, every test a third longer
    (test-seconds 5,203 against 3,994): a running experiment's probes and members use CPU for
    as long as it runs. PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = os.cpu_count() or 1
    return cores + cores // 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(TESTS).as_posix()
        if where.startswith(QUICK):
            item.add_marker(pytest.mark.quick)
    # The Kubernetes files first (one work unit of minutes, below), then the files with a slow
    # test (xdist hands out units in this order, addopts' --no-loadscope-reorder): one of
    # minutes started last would run on alone at the end.
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (KUBERNETES not in item.path.parents, item.path not in slow_files))


class _FileScheduling(LoadFileScheduling):
    """`--dist loadfile`, but every file of tests/kubernetes one unit: its tests share one
    control plane (tests/kubernetes/conftest.py), started once instead of once per worker."""

    def _split_scope(self, nodeid: str) -> str:
        file = super()._split_scope(nodeid)
        return KUBERNETES_UNIT if file.startswith(KUBERNETES_UNIT + "/") else file


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    return _FileScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _processes_under(directory: Path) -> list[str]:
    """Live processes whose command line names a path under `directory` ("PID argv")."""
    mark, found = f"{directory}{os.sep}", []  # a path under it, not a sibling sharing its prefix
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        argv = [a.decode(errors="replace") for a in raw.split(b"\0")]
        if any(mark in a for a in argv):
            found.append(f"{entry.name} {' '.join(a for a in argv if a)}")
    return found


# Handlers a test may change in this process, where its signals would otherwise stay changed.
# (SIGALRM is pytest-timeout's, which puts its own back.)
_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2)  # fmt: skip


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """Each test finds the worker's signal handlers as the worker set them. A command run in
    this process (typer's CliRunner) may change them for good: `rsdrill run` ignores SIGINT
    once its result is written, and every process the worker started after that, exec'd or
    forked, began with SIGINT ignored (a test sending one waited for ever)."""
    before = {sig: signal.getsignal(sig) for sig in _HANDLED}
    try:
        return (yield)
    finally:
        for sig, handler in before.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)


@pytest.fixture(scope="session", autouse=True)
def nothing_outlives_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every process started in this session's scratch directories (members, routers, the
    daemons a test serves from there) is gone when the session ends: a test that kept a
    sandbox and did not tear it down left its three members running for good. Set up first,
    so torn down after every other session fixture; the leftovers are killed, then reported."""
    base = tmp_path_factory.getbasetemp()
    yield
    deadline = time.monotonic() + 5.0  # a `down()` that signalled without waiting
    while (left := _processes_under(base)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for line in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(" ", 1)[0]), signal.SIGKILL)
    assert not left, "processes the tests started outlived them (killed now):\n" + "\n".join(
        line[:300] for line in left
    )


@pytest.fixture(scope="session")
def free_port_base() -> Callable[[int], int]:
    """A function returning a base port such that `count` consecutive ports from it bind.

    Each port is checked by binding it; ports handed out earlier in the session are never
    handed out again, so a sandbox torn down by one test cannot be confused with the next.
    """

    def find(count: int) -> int:
        for _ in range(200):
            base = random.randrange(_PORT_LOW, _PORT_HIGH - count)
            ports = range(base, base + count)
            if _handed_out.isdisjoint(ports) and all(_bindable(p) for p in ports):
                _handed_out.update(ports)
                return base
        raise RuntimeError(f"no {count} consecutive free ports in {_PORT_LOW}-{_PORT_HIGH}")

    return find


@pytest.fixture
def sandbox_dir(tmp_path: Path) -> Iterator[Path]:
    """A sandbox directory whose member processes are stopped after the test, whatever happened."""
    directory = tmp_path / "sandbox"
    yield directory
    Sandbox(directory).down(grace_s=2.0)


@pytest.fixture
def replset(sandbox_dir: Path, free_port_base: Callable[[int], int]) -> Callable[..., Sandbox]:
    """Start an emulator replica set; fast elections unless the test asks for MongoDB's defaults."""

    def make(topology: str = "rs3", election_timeout_ms: int = 1000, **options: Any) -> Sandbox:
        spec = build_topology(
            topology,
            port_base=free_port_base(3),
            settings=Settings(election_timeout_ms=election_timeout_ms),
            **options,
        )
        return up(sandbox_dir, spec, EmulatorEngine())

    return make


@pytest.fixture
def client_for() -> Iterator[Callable[..., MongoClient[Any]]]:
    """MongoClients with short timeouts, all closed after the test."""
    clients: list[MongoClient[Any]] = []

    def make(target: Sandbox | str, **kwargs: Any) -> MongoClient[Any]:
        options: dict[str, Any] = {
            "serverSelectionTimeoutMS": 20_000,
            "connectTimeoutMS": 1000,
            "socketTimeoutMS": 5000,
        }
        if isinstance(target, str):
            options["directConnection"] = True
            uri = f"mongodb://{target}/"
        else:
            uri = target.uri
        client: MongoClient[Any] = MongoClient(uri, **{**options, **kwargs})
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture(scope="module")
def existing_cluster(
    tmp_path_factory: pytest.TempPathFactory, free_port_base: Callable[[int], int]
) -> Iterator[Path]:
    """A running sharded cluster (config servers, two rs3 shards, two routers; 1 s elections,
    balancer off) started outside the runs, for targets found from their routers; one per
    module (11 processes to start: each run leaves it healthy, its faults reverted), stopped
    afterwards, whatever happened (tests/harness/sharded_cluster.py)."""
    from tests.harness.sharded_cluster import SIZE, existing_cluster

    directory = tmp_path_factory.mktemp("cluster")
    with existing_cluster(directory, free_port_base(SIZE)) as running:
        yield running
