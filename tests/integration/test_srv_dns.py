"""`mongodb+srv://` resolved as drivers resolve it, through the system's resolver: in a network
namespace of the test's own, whose /etc/resolv.conf (bind-mounted by `ip netns exec`) names a
DNS server the test runs on that namespace's loopback. pymongo and rsdrill are run inside it,
unpatched: nothing here replaces dnspython's resolver."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.catalog import catalog
from tests.e2e.local_set import local_target

REPO = Path(__file__).resolve().parents[2]
SRV_NAME = "rs.sandbox.test"
PORT_BASE = 28017

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root and iproute2 to make a network namespace",
)


@dataclass
class Namespace:
    name: str
    sandbox: Path

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.name, *argv], capture_output=True, text=True,
            timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip

    def python(self, script: str) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-c", script)


def _zone(ports: list[int]) -> dict[str, list[list[str]]]:
    zone: dict[str, list[list[str]]] = {
        f"_mongodb._tcp.{SRV_NAME}.": [
            ["SRV", f"0 0 {port} m{i}.{SRV_NAME}."] for i, port in enumerate(ports)
        ],
        f"{SRV_NAME}.": [["TXT", '"replicaSet=rs0"']],
    }
    for i in range(len(ports)):
        zone[f"m{i}.{SRV_NAME}."] = [["A", "127.0.0.1"]]
    return zone


@pytest.fixture(scope="module")
def namespace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Namespace]:
    name = f"rsdrill-dns-{os.getpid()}"
    work = tmp_path_factory.mktemp("srv")
    etc = Path("/etc/netns") / name
    subprocess.run(["ip", "netns", "add", name], check=True)
    dns_server: subprocess.Popen[bytes] | None = None
    ns = Namespace(name, work / "sandbox")
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        etc.mkdir(parents=True)
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        zone = work / "zone.json"
        zone.write_text(json.dumps(_zone([PORT_BASE, PORT_BASE + 1, PORT_BASE + 2])))
        dns_server = subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, "-m", "tests.harness.dns", str(zone)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        up = ns.run(sys.executable, "-m", "rsdrill.cli", "sandbox", "up", "--topology", "rs3",
                    "--dir", str(ns.sandbox), "--port-base", str(PORT_BASE),
                    "--election-timeout", "1000")  # fmt: skip
        assert up.returncode == 0, up.stdout + up.stderr
        yield ns
    finally:
        ns.run(sys.executable, "-m", "rsdrill.cli", "sandbox", "down", "--dir",
               str(ns.sandbox))  # fmt: skip
        if dns_server is not None:
            dns_server.kill()
            dns_server.wait()
        # Anything still in the namespace goes with it.
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
        for pid in pids.stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], check=False)
        shutil.rmtree(etc, ignore_errors=True)


PYMONGO = """
from pymongo import MongoClient, WriteConcern
client = MongoClient("mongodb+srv://{name}/?tls=false", serverSelectionTimeoutMS=10000)
client.drill.get_collection("t", write_concern=WriteConcern("majority")).insert_one({{"x": 1}})
print(client.drill.t.count_documents({{}}), sorted(client.nodes))
"""


def test_pymongo_resolves_the_srv_name_through_the_tests_dns_server(namespace: Namespace) -> None:
    done = namespace.python(PYMONGO.format(name=SRV_NAME))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1 "), done.stdout
    # The TXT record's replicaSet took pymongo to the set's own member list.
    assert f"('127.0.0.1', {PORT_BASE})" in done.stdout


def test_rsdrill_resolves_it_as_pymongo_does(namespace: Namespace) -> None:
    script = (
        "from rsdrill.connection import parse_uri\n"
        f"parsed = parse_uri('mongodb+srv://{SRV_NAME}/?tls=false')\n"
        "print(parsed.replica_set, sorted(parsed.seeds))\n"
    )
    done = namespace.python(script)
    assert done.returncode == 0, done.stderr
    seeds = [f"m{i}.{SRV_NAME}:{PORT_BASE + i}" for i in range(3)]
    assert done.stdout.strip() == f"rs0 {seeds}"


def test_an_srv_name_that_does_not_resolve_is_one_clear_line(
    namespace: Namespace, tmp_path: Path
) -> None:
    document = catalog("rs3-stepdown")
    document["target"] = local_target(namespace.sandbox, "mongodb+srv://nowhere.sandbox.test/")
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(document))
    done = namespace.run(sys.executable, "-m", "rsdrill.cli", "check", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "✘ connection string: The DNS query name does not exist: " in done.stdout
    assert "_mongodb._tcp.nowhere.sandbox.test" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_a_run_reaches_the_set_by_its_srv_name(namespace: Namespace, tmp_path: Path) -> None:
    document = catalog("rs3-stepdown")
    document["target"] = local_target(namespace.sandbox, f"mongodb+srv://{SRV_NAME}/?tls=false")
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(document))
    out = tmp_path / "out"
    started = time.monotonic()
    done = namespace.run(sys.executable, "-m", "rsdrill.cli", "run", str(path), "--out",
                         str(out), "--no-live", "--no-history", "--yes", timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["target"]["uri"].startswith("mongodb+srv://")
    assert result["metrics"]["failover_s"] is not None
    assert time.monotonic() - started < 120
