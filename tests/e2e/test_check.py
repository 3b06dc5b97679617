"""`rsdrill check` against real targets, nothing injected: the privileges of users with MongoDB's
built-in roles (a sandbox that enforces them), and the bad inputs a user meets first (an
unreadable CA file, a server version rsdrill does not know)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hostile_servers import hostile_server
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from rsdrill.sandbox.auth import read_auth
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology
from tests.e2e.catalog import catalog
from tests.e2e.local_set import local_target
from tests.harness.cli import rsdrill_run

USERS = {
    "app": ["readWrite@rsdrill_probe"],
    "monitor": ["clusterMonitor", "readWrite@rsdrill_probe"],
}


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, free_port_base: Callable[[int], int]
) -> Iterator[Sandbox]:
    directory = tmp_path_factory.mktemp("secured") / "set"
    spec = build_topology("rs3", port_base=free_port_base(3),
                          settings=Settings(election_timeout_ms=1000))  # fmt: skip
    sandbox = up(directory, spec, EmulatorEngine(), auth=True, users=USERS)
    yield sandbox
    sandbox.down(grace_s=2.0)


def _uri(sandbox: Sandbox, user: str) -> str:
    login = read_auth(sandbox.directory, user)
    assert login is not None
    hosts = ",".join(m.host for m in sandbox.spec.members)
    return f"mongodb://{user}:{quote(login.password)}@{hosts}/?replicaSet=rs0"


def _check(tmp_path: Path, document: dict[str, Any]) -> tuple[int, str]:
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(document))
    done = rsdrill_run(
        ["check", str(path)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def _experiment(sandbox: Sandbox, user: str, name: str = "rs3-stepdown") -> dict[str, Any]:
    document = catalog(name)
    document["target"] = local_target(sandbox.directory, _uri(sandbox, user))
    return document


def test_a_user_without_cluster_monitor_is_told_which_role_to_grant(
    secured: Sandbox, tmp_path: Path
) -> None:
    code, output = _check(tmp_path, _experiment(secured, "app", "rs3-secondary-kill"))
    assert code == 2, output
    [line] = [line for line in output.splitlines() if line.startswith("✘ privileges:")]
    assert "replSetGetStatus on cluster" in line and "grant clusterMonitor" in line
    assert "the user has readWrite@rsdrill_probe" in line
    assert read_auth(secured.directory, "app").password not in output  # type: ignore[union-attr]


def test_a_stepdown_needs_cluster_manager_too(secured: Sandbox, tmp_path: Path) -> None:
    code, output = _check(tmp_path, _experiment(secured, "monitor"))
    assert code == 2, output
    [line] = [line for line in output.splitlines() if line.startswith("✘ privileges:")]
    assert "replSetStateChange on cluster for the stepdown fault: grant clusterManager" in line
    assert "clusterMonitor" not in line.split("(the user has")[0]


def test_a_forced_reconfig_needs_cluster_manager_and_the_server_enforces_it(
    secured: Sandbox, tmp_path: Path
) -> None:
    document = _experiment(secured, "monitor", "dc2-1-lose-majority-dc")
    code, output = _check(tmp_path, document)
    assert code == 2, output
    [line] = [line for line in output.splitlines() if line.startswith("✘ privileges:")]
    assert "replSetConfigure on cluster for the recovery's forced reconfig" in line, line
    # The members refuse it as mongod does (Unauthorized), and keep their config.
    with MongoClient(_uri(secured, "monitor"), serverSelectionTimeoutMS=5000) as client:
        config = client.admin.command("replSetGetConfig")["config"]
        config["members"] = config["members"][:1]
        with pytest.raises(OperationFailure) as refused:
            client.admin.command("replSetReconfig", config, force=True)
        assert refused.value.code == 13
        assert len(client.admin.command("replSetGetConfig")["config"]["members"]) == 3


def test_the_admin_passes_every_check(secured: Sandbox, tmp_path: Path) -> None:
    code, output = _check(tmp_path, _experiment(secured, "rsdrill"))
    assert code == 0, output
    assert "✔ privileges: roles root@admin" in output
    assert "✔ server version: replica set, version 7.0.0, rsdrill's emulator" in output
    assert sum(line.startswith("✔ reach ") for line in output.splitlines()) == 3


def test_a_fail_point_needs_host_manager_and_test_commands(
    secured: Sandbox, tmp_path: Path
) -> None:
    code, output = _check(tmp_path, _experiment(secured, "monitor", "primary-fail-command"))
    assert code == 2, output
    [line] = [line for line in output.splitlines() if line.startswith("✘ privileges:")]
    assert ("configureFailPoint on cluster for the mongodb-fail-command fault: grant "
            "hostManager") in line  # fmt: skip
    code, output = _check(tmp_path, _experiment(secured, "rsdrill", "primary-fail-command"))
    assert code == 0, output
    assert "✔ test commands: configureFailPoint is available (enableTestCommands)" in output


def test_run_refuses_before_anything_when_a_role_is_missing(
    secured: Sandbox, tmp_path: Path
) -> None:
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(_experiment(secured, "app", "rs3-secondary-kill")))
    done = rsdrill_run(
        ["run", str(path), "--yes", "--no-live",
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "grant clusterMonitor" in done.stderr
    assert not (tmp_path / "out").exists()
    assert [s.state for s in secured.status()].count("PRIMARY") == 1  # nothing was broken


def test_an_unreadable_ca_file_is_one_line(secured: Sandbox, tmp_path: Path) -> None:
    document = _experiment(secured, "rsdrill")
    missing = tmp_path / "nowhere" / "ca.pem"
    document["target"]["uri"] += f"&tls=true&tlsCAFile={missing}"
    code, output = _check(tmp_path, document)
    assert code == 2, output
    assert "✘ connection string: " in output and str(missing) in output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1


def test_a_server_version_out_of_range_is_refused(tmp_path: Path) -> None:
    with hostile_server("mongodb42") as old_server:
        code, output = _check(tmp_path, _old_server_experiment(old_server))
    assert code == 2, output
    assert ("✘ server version: server version 4.2.24 is outside the range rsdrill supports "
            "(4.4 to 8.0)") in output  # fmt: skip
    assert "Traceback" not in output


def _old_server_experiment(old_server: str) -> dict[str, Any]:
    document = catalog("rs1-host-kill")
    document["target"] = {"platform": "local", "topology": "rs1",
                          "uri": f"mongodb://{old_server}/",
                          "members": [{"host": old_server, "start": "true"}]}  # fmt: skip
    return document
