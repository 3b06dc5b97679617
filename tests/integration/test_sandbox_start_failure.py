"""A sandbox member that exits while starting fails the start at once, quoting its log's last
line (passwords masked)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rsdrill.sandbox.cluster import EmulatorEngine, SandboxError, up
from rsdrill.sandbox.config import build_topology


def test_a_member_that_exits_while_starting_is_named_with_its_last_line(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    member = tmp_path / "member"
    member.write_text(
        "#!/bin/sh\necho starting\necho cannot reach mongodb://u:S3cretPw@db1/ >&2\nexit 1\n"
    )
    member.chmod(0o755)
    port = free_port_base(1)
    with pytest.raises(SandboxError) as failed:
        up(tmp_path / "set", build_topology("rs1", port_base=port), EmulatorEngine(str(member)))
    log = tmp_path / "set" / "members" / str(port) / "member.log"
    assert str(failed.value) == (
        f"127.0.0.1:{port} exited while starting (see {log}): cannot reach mongodb://u:***@db1/"
    )
    assert failed.value.exit_code == 4
