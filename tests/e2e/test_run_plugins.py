"""The run's events are the extension seam: a plugin installed as a package with an
`rsdrill.plugins` entry point (as pytest plugins are) sees every event of a real run, in order,
and adds an output of its own next to the built-in reports."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rsdrill.hooks import GROUP
from tests.harness.cli import rsdrill_run

TOY_PLUGIN = '''
"""A toy output: every event of the run, one JSON line each, in events.jsonl."""

import json
import os

from rsdrill.hooks import hookimpl


def _note(event, **fields):
    with open(os.environ["TOY_EVENTS"], "a") as out:
        out.write(json.dumps({"event": event, **fields}) + "\\n")


@hookimpl
def rsdrill_run_started(experiment, run_id, out_dir):
    _note("run_started", experiment=experiment)


@hookimpl
def rsdrill_phase(name):
    _note("phase", name=name)


@hookimpl
def rsdrill_fault_applied(fault):
    _note("fault_applied", kind=fault.kind, target=fault.target)


@hookimpl
def rsdrill_fault_reverted(fault):
    _note("fault_reverted", kind=fault.kind, reverted=fault.reverted_at_s is not None)


@hookimpl
def rsdrill_verdict(result):
    _note("verdict", verdict=result.verdict)


@hookimpl
def rsdrill_run_finished(result, ops, out_dir):
    # The built-in reports come first: result.json is there already.
    _note("run_finished", ops=len(ops), result_written=(out_dir / "result.json").exists())
    raise RuntimeError("a broken plugin must not change the run")
'''

EXPERIMENT = """\
name: plugin-events
target: {platform: sandbox, topology: rs3, election_timeout: 1s}
faults:
  - {at: 1s, kind: host-freeze, select: secondary, duration: 1s}
observe: {after_revert: 3s}
"""


def test_an_entry_point_plugin_sees_every_event_in_order(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "toyplugin").mkdir(parents=True)
    (site / "toyplugin" / "__init__.py").write_text(TOY_PLUGIN)
    info = site / "toyplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\ntoy = toyplugin\n")
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT)
    events = tmp_path / "events.jsonl"
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    run = rsdrill_run(
        ["run", str(experiment), "--out",
         str(tmp_path / "out"), "--no-live", "--no-history"],
        capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": path, "TOY_EVENTS": str(events),
             "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    seen = [json.loads(line) for line in events.read_text().splitlines()]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    host = result["faults"][0]["target"]
    assert seen[:-1] == [
        {"event": "run_started", "experiment": "plugin-events"},
        *({"event": "phase", "name": n} for n in ("setup", "preflight", "guards", "faults")),
        {"event": "fault_applied", "kind": "host-freeze", "target": host},
        {"event": "fault_reverted", "kind": "host-freeze", "reverted": True},
        *(
            {"event": "phase", "name": n}
            for n in ("observe", "revert", "analyze", "audit", "teardown")
        ),
        {"event": "verdict", "verdict": "pass"},
    ]
    last = seen[-1]
    assert (last["event"], last["result_written"]) == ("run_finished", True)
    assert last["ops"] > 0 and last["ops"] == len(
        (tmp_path / "out" / "history.jsonl").read_text().splitlines()
    )
    assert run.stderr.splitlines()[-1] == (
        "plugin toy failed in rsdrill_run_finished: RuntimeError: a broken plugin must not "
        "change the run"
    )
    assert result["verdict"] == "pass"
