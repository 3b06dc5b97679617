"""The catalog's experiment files, aimed at another target and compressed in time: MongoDB's
election timeout and heartbeat interval divided by ten (1 s, 200 ms), faults at 3 s held for
4 s, 10 s of observation. Their probes and SLOs stay theirs (the SLOs were written for 10 s
elections, so they hold with room to spare).

Both timings, not the election timeout alone: a primary steps down when it has not heard from
a majority within the election timeout, and a secondary still waiting on a frozen sync source
is heard from only by its heartbeats. Heartbeats every 2 s against a 1 s timeout make the new
primary step down between two of them, again and again, as mongod's would."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from tests.harness.cli import rsdrill_run

REPO = Path(__file__).resolve().parents[2]
FAULT_S = "4s"


def catalog(name: str, fault_s: str = FAULT_S, **target: Any) -> dict[str, Any]:
    """experiments/NAME.yaml with `target` fields changed and its timeline compressed (faults
    held for `fault_s`)."""
    document = yaml.safe_load((REPO / "experiments" / f"{name}.yaml").read_text())
    document["target"].update(target)
    if (
        document["target"].get("topology") != "standalone"
        and document["target"].get("platform", "sandbox") == "sandbox"
    ):
        document["target"]["election_timeout"] = "1s"
        document["target"].setdefault("heartbeat_interval", "200ms")
    for fault in document["faults"]:
        fault["at"] = "3s"
        if fault["kind"] != "stepdown":
            fault["duration"] = fault_s
        restart = fault.get("restart")
        if isinstance(restart, dict) and "after" in restart:
            restart["after"] = fault_s
            fault.pop("duration")
    document["observe"] = {"after_revert": "10s"}
    return document


def changed(name: str, **changes: Any) -> dict[str, Any]:
    """experiments/NAME.yaml with `changes` merged in (dotted keys, e.g. "faults.0.duration")."""
    spec: dict[str, Any] = yaml.safe_load((REPO / "experiments" / f"{name}.yaml").read_text())
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        node: Any = spec
        for key in path:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        node[int(last) if isinstance(node, list) else last] = value
    return spec


def run_cli(tmp_path: Path, document: dict[str, Any], *args: str) -> tuple[int, str, Path]:
    """`rsdrill run` on `document`: exit status, output, and the output directory."""
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(document))
    out = tmp_path / "out"
    done = rsdrill_run(
        ["run", str(path), "--out", str(out),
         "--no-live", "--no-history", *args],
        capture_output=True, text=True, timeout=240, cwd=REPO,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr, out


def result_of(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "result.json").read_text()))
