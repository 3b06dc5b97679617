"""The measurement itself: how fast pymongo finds a new primary on the sandbox, with its monitor
streaming as against mongod 4.4+ (bench/rediscovery.py; figures there, generous bounds here).

By the SDAM spec a streaming monitor hears of a new primary in about one round trip, because
the member answers the pending awaitable hello the moment its topologyVersion changes; without
that, a client learns only at its next poll (every 500 ms at best while it waits to select a
server). A member that cannot stream would fail the bounds below by an order of magnitude."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_streaming_client_finds_the_new_primary_in_a_round_trip(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    out = tmp_path / "rediscovery.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "rediscovery.py"), "--trials", "1", "--faults",
         "stepdown,kill", "--election-timeout", "1000", "--port-base", str(free_port_base(3)),
         "--json", str(out)],
        capture_output=True, text=True, timeout=280, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials = {t["fault"]: t for t in json.loads(out.read_text())}
    assert set(trials) == {"stepdown", "kill"}
    for fault, trial in trials.items():
        # Told by an awaited (streamed) hello: the monitor really streams from the sandbox.
        assert trial["stream_awaited"] is True, (fault, trial)
        # About one round trip after the new primary is writable (~1 ms measured); polling
        # takes ~500 ms.
        assert 0 <= trial["seen_s"]["stream"] < 0.25, (fault, trial)
        assert trial["write_s"]["stream"] < 1.0, (fault, trial)
    # A killed member's sockets are reset by the kernel: its monitor's next read fails at once.
    assert trials["kill"]["detected_s"]["stream"] < 1.0, trials["kill"]
