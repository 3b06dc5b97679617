"""How fast an rs3 primary cut off from the other members steps down, and the majority elects.

Starts an emulator rs3, then N times: partitions the primary from the other members (both
ways, nftables, as `kind: network-partition` does), reads from the members' event logs when the
old primary stepped down and when another member became writable, heals, and waits until the
old primary is back as SECONDARY. Also times the injector itself: inject, verify, revert.

MongoDB's rule: a primary that hears from no majority within electionTimeoutMillis steps down;
the others stand for election electionTimeoutMillis (+ up to 15 %) after their last heartbeat
from it. Both figures are printed against that timeout.

Usage: python bench/partition.py [--trials 5] [--election-timeout 2s] (root; needs `nft`)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rsdrill.experiment.schema import parse_duration
from rsdrill.platforms.machine.network import NetworkPartition
from rsdrill.platforms.sandbox.target import SandboxHosts, free_port_base
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, hello, member_state, up
from rsdrill.sandbox.config import Settings, build_topology
from rsdrill.sandbox.groundtruth import first_after

DEADLINE_S = 60.0


def _wait(predicate: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def _primary(sandbox: Sandbox) -> str | None:
    for member in sandbox.spec.members:
        reply = hello(member.host, options=sandbox.connect_options)
        if reply and reply.get("isWritablePrimary"):
            return member.host
    return None


def trial(sandbox: Sandbox) -> tuple[float, float, float, float, float]:
    """(stepdown_s, elected_s, inject_s, verify_s, revert_s) for one partition of the primary."""
    _wait(lambda: _primary(sandbox), "a primary")
    old = _primary(sandbox)
    assert old is not None
    members = [m.host for m in sandbox.spec.members]
    partition = NetworkPartition(
        SandboxHosts(sandbox), old, members, isolate_from="members", direction="both"
    )
    started = time.monotonic()
    partition.inject()
    injected = time.monotonic()
    if not partition.verify(10):
        raise SystemExit("the partition did not take effect")
    verified = time.monotonic()
    try:
        _wait(lambda: first_after(sandbox.directory, "stepdown", started, member=old), "stepdown")
        _wait(
            lambda: first_after(sandbox.directory, "writable", started, other_than=old),
            "a new primary",
        )
    finally:
        before_revert = time.monotonic()
        partition.revert()
        reverted = time.monotonic()
    stepdown = first_after(sandbox.directory, "stepdown", started, member=old)
    elected = first_after(sandbox.directory, "writable", started, other_than=old)
    assert stepdown is not None and elected is not None
    options = sandbox.connect_options
    _wait(lambda: member_state(old, 1.0, options=options) == "SECONDARY" and _primary(sandbox),
          "the old primary back")  # fmt: skip
    return (
        stepdown["t_mono"] - started,
        elected["t_mono"] - started,
        injected - started,
        verified - injected,
        reverted - before_revert,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--election-timeout", default="2s")
    args = parser.parse_args()
    timeout_s = parse_duration(args.election_timeout)
    spec = build_topology(
        "rs3",
        port_base=free_port_base(3),
        settings=Settings(election_timeout_ms=round(timeout_s * 1000)),
    )
    with tempfile.TemporaryDirectory(prefix="rsdrill-bench-partition-") as tmp:
        sandbox = up(Path(tmp) / "sandbox", spec, EmulatorEngine())
        try:
            rows = []
            for i in range(args.trials):
                row = trial(sandbox)
                rows.append(row)
                print(
                    f"trial {i + 1}: stepdown {row[0]:.2f} s, new primary writable "
                    f"{row[1]:.2f} s after the cut; inject {row[2] * 1000:.0f} ms, verify "
                    f"{row[3] * 1000:.0f} ms, revert {row[4] * 1000:.0f} ms",
                    flush=True,
                )
        finally:
            sandbox.down()
    for name, index in (("stepdown", 0), ("new primary writable", 1)):
        values = [r[index] for r in rows]
        print(
            f"{name}: median {statistics.median(values):.2f} s, range {min(values):.2f}-"
            f"{max(values):.2f} s (electionTimeout {timeout_s:g} s; "
            f"{sum(v <= timeout_s * 1.15 + 1 for v in values)}/{len(values)} within "
            f"1.15 x electionTimeout + 1 s)"
        )
    for name, index in (("inject", 2), ("verify", 3), ("revert", 4)):
        values = [r[index] * 1000 for r in rows]
        print(f"{name}: median {statistics.median(values):.0f} ms, max {max(values):.0f} ms")


if __name__ == "__main__":
    main()
