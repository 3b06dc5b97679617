"""On a terminal, `plan` and `check` show one-way faults in red, and nothing else in colour;
with NO_COLOR (no-color.org) set, no escape sequence at all: a CI log that allocates a terminal
showed `[0m` after every line of the plan, NO_COLOR or not."""

from __future__ import annotations

import os
import pty
from pathlib import Path

import pytest

from tests.harness.cli import Rsdrill

ROOT = Path(__file__).resolve().parents[2]
ONE_WAY = str(ROOT / "experiments" / "rs3-disaster-recovery-drill.yaml")  # data-loss: one-way


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    master, slave = pty.openpty()
    proc = Rsdrill(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0, seen
    return seen.decode()


@pytest.mark.parametrize("no_color", ["1", None], ids=["NO_COLOR", "colour"])
def test_only_one_way_lines_are_coloured_and_none_under_no_color(no_color: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"TERM": "xterm"}
    if no_color is not None:
        env["NO_COLOR"] = no_color
    lines = _on_a_terminal(["plan", ONE_WAY], env).splitlines()
    coloured = [line for line in lines if "\x1b[" in line]
    if no_color is not None:
        assert coloured == []
    else:
        assert coloured and all("ONE-WAY" in line for line in coloured), coloured
        assert len(coloured) < len(lines)
