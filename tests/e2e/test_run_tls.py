"""Catalog experiments over TLS, with x.509 client certificates and with SCRAM: the sandbox's,
and a set of one's own reached through a connection string with TLS options (platform local,
as a user points rsdrill at a staging set)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest

from rsdrill.sandbox.certs import CLIENT_SUBJECT, issue, new_authority, tls_files
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology
from tests.e2e.catalog import catalog, result_of, run_cli
from tests.e2e.local_set import local_target


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "target", "auth"),
    [
        ("rs3-primary-kill", {}, "x509"),
        ("rs3-primary-kill", {}, "scram"),
        ("rs1-host-kill", {"topology": "standalone"}, "x509"),
        ("rs1-host-kill", {"topology": "standalone"}, "scram"),
    ],
)
def test_catalog_experiments_over_tls(
    tmp_path: Path, name: str, target: dict[str, str], auth: str
) -> None:
    document = catalog(name, tls=True, auth=auth, **target)
    code, output, out = run_cli(tmp_path, document)
    assert code == 0, output
    result = result_of(out)
    server = result["target"]["server"]
    assert server["tls"] is True and server["emulator"] is True
    assert server["auth_mechanism"] == ("MONGODB-X509" if auth == "x509" else "SCRAM-SHA-256")
    assert server["topology"] == target.get("topology", "replica set")
    metrics = result["metrics"]
    assert metrics["lost_acknowledged_writes"] == 0 and metrics["acknowledged_writes"] > 0
    # The status-based probes got in too: every member recovered.
    assert metrics["recovery_s"] and all(v is not None for v in metrics["recovery_s"].values())


def test_check_names_a_client_certificate_the_members_reject(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    directory = tmp_path / "existing"
    spec = build_topology("rs3", port_base=free_port_base(3), tls=True, x509=True)
    existing = up(directory, spec, EmulatorEngine())
    try:
        foreign = tmp_path / "foreign.pem"
        foreign.write_bytes(issue(new_authority("someone else"), CLIENT_SUBJECT))
        uri = existing.uri.replace(quote(str(tls_files(directory).client)), str(foreign))
        document = catalog("rs3-stepdown")
        document["target"] = local_target(directory, uri)
        code, output, out = run_cli(tmp_path, document, "--yes")
        assert code == 2, output
        assert "check failed, nothing was injected" in output and not out.exists()
        rejected = [line for line in output.splitlines() if line.startswith("✘ reach ")]
        assert len(rejected) == 3, output
        assert all("rejected the client certificate" in line for line in rejected)
        assert "Traceback" not in output
    finally:
        Sandbox(directory).down(grace_s=2.0)


@pytest.mark.slow
def test_a_set_of_ones_own_behind_tls_and_x509(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    directory = tmp_path / "existing"
    spec = build_topology("rs3", port_base=free_port_base(3), tls=True, x509=True,
                          settings=Settings(election_timeout_ms=1000))  # fmt: skip
    existing = up(directory, spec, EmulatorEngine())
    try:
        target = local_target(directory, existing.uri)
        document = catalog("rs3-primary-kill")
        document["target"] = target
        code, output, out = run_cli(tmp_path, document, "--yes")
        assert code == 0, output
        result = result_of(out)
        assert result["target"]["server"]["auth_mechanism"] == "MONGODB-X509"
        assert result["metrics"]["failover_s"] is not None
        assert result["metrics"]["lost_acknowledged_writes"] == 0
    finally:
        Sandbox(directory).down(grace_s=2.0)
