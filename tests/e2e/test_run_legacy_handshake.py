"""Catalog experiments against members that answer only isMaster (no hello): the exit codes are
those the same experiments give against members with hello, and the result says which
handshake the server spoke."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.catalog import catalog, result_of, run_cli


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "target", "fault_s", "exit_code"),
    [
        ("rs3-primary-kill", {}, "4s", 0),
        ("rs3-secondary-kill", {}, "4s", 0),
        ("rs3-stepdown", {}, "4s", 0),
        ("rs3-freeze-primary", {}, "4s", 0),
        # The partition and the disk fault find the primary and its peers through isMaster too.
        ("minority-partition", {}, "4s", 0),
        ("primary-journal-eio", {}, "4s", 0),
        # Its SLO allows 4 s of failed inserts: the fail point is held for 3 s.
        ("primary-fail-command", {}, "3s", 0),
        # Its SLO fails on purpose: w:majority stalls while a PSA set's secondary is down, and
        # the stall must outlast the file's 5 s SLO for it to fail as the file intends.
        ("psa-secondary-kill", {}, "8s", 1),
        ("rs1-host-kill", {"topology": "standalone"}, "4s", 0),
    ],
)
def test_catalog_experiments_against_isMaster_only_members(
    tmp_path: Path, name: str, target: dict[str, str], fault_s: str, exit_code: int
) -> None:
    code, output, out = run_cli(tmp_path, catalog(name, fault_s, handshake="legacy", **target))
    assert code == exit_code, output
    result = result_of(out)
    server = result["target"]["server"]
    assert (server["handshake"], server["version"]) == ("isMaster", "4.4.1")
    metrics = result["metrics"]
    if name != "psa-secondary-kill":
        assert metrics["lost_acknowledged_writes"] in (0, None)
    if name in ("rs3-primary-kill", "rs3-stepdown", "rs3-freeze-primary", "minority-partition",
                "primary-journal-eio"):  # fmt: skip
        # Roles were read through isMaster: the failover was seen.
        assert metrics["failover_s"] is not None, metrics
