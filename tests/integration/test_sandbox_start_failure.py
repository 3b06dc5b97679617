"""A sandbox member that exits while starting fails the start at once, quoting its log's last
line (passwords masked)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rsdrill.sandbox.cluster import EmulatorEngine, SandboxError, up
from rsdrill.sandbox.config import ClusterSpec, build_topology
from rsdrill.sandbox.sharded import ShardedSandbox


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


def test_a_router_that_exits_while_starting_is_named_with_its_last_line(
    tmp_path: Path, free_port_base: Callable[[int], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    router = tmp_path / "router"
    router.write_text(
        "#!/bin/sh\necho no config servers at mongodb://u:S3cretPw@cfg/ >&2\nexit 1\n"
    )
    router.chmod(0o755)
    # Named by its port, as a router's command line is: the pid file is believed only then.
    monkeypatch.setattr(EmulatorEngine, "router_argv", lambda _, __, host: [str(router), host])
    host = f"127.0.0.1:{free_port_base(1)}"
    ClusterSpec((), (host,), True).write(tmp_path)
    sandbox = ShardedSandbox(tmp_path)
    log = sandbox.spec.router_dir(sandbox.directory, host) / "router.log"
    expected = f"router {host} exited while starting (see {log}): no config servers at " \
        "mongodb://u:***@cfg/"  # fmt: skip
    sandbox.start_router(host)
    with pytest.raises(SandboxError) as failed:
        sandbox.wait_routers(time.monotonic() + 30)
    assert (str(failed.value), failed.value.exit_code) == (expected, 4)
    with pytest.raises(SandboxError) as failed:  # its restart, as a router-kill fault's revert
        sandbox.restart_router(host)
    assert str(failed.value) == expected
