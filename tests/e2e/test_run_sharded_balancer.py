"""`guards: {stop_balancer: true}` on a sharded sandbox: the balancer is off while the faults run
and on again once they are reverted (the run read through its routers from inside the run: its
own plugin's hooks); one already off is left off; a SIGTERMed run restores it too; after a
SIGKILLed run, `rsdrill recover` starts it again from the journal."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from rsdrill.engine.balancer import KEY, REVERT_ACTION
from rsdrill.engine.journal import read_records
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.history import FaultRecord
from rsdrill.hooks import hookimpl
from rsdrill.result import Result
from rsdrill.sandbox.sharded import ShardedSandbox
from tests.e2e.test_run_cli import _recover, _start, _wait_for_text

# One shard of three members and one router: the smallest cluster with a secondary to freeze.
TARGET = {"platform": "sandbox", "topology": "sharded", "shards": 1, "shard_topology": "rs3",
          "mongos": 1, "election_timeout": "1s"}  # fmt: skip
PROBES = {"availability": {"interval": "50ms", "timeout": "250ms", "retries": True},
          "lag": None, "durability": None}  # fmt: skip
FREEZE = {"kind": "host-freeze", "select": {"shard": "shard0", "role": "secondary"}}


def balancer_mode(uri: str) -> str:
    """balancerStatus's mode, through the cluster's routers."""
    with MongoClient(uri, serverSelectionTimeoutMS=10_000) as client:
        return str(client.admin.command("balancerStatus")["mode"])


@dataclass
class BalancerWatch:
    """A plugin of the run: the balancer's mode when each fault is in force, and once the run
    has reverted everything (its teardown phase, before the cluster is taken down)."""

    out_dir: Path
    terminate: bool = False  # SIGTERM the run once the first fault is in force
    modes: dict[str, str] = field(default_factory=dict)

    def _mode(self) -> str:
        return balancer_mode(ShardedSandbox(self.out_dir / "sandbox").uri)

    @hookimpl
    def rsdrill_fault_applied(self, fault: FaultRecord) -> None:
        self.modes["fault"] = self._mode()
        if self.terminate:
            os.kill(os.getpid(), signal.SIGTERM)

    @hookimpl
    def rsdrill_fault_reverted(self, fault: FaultRecord) -> None:
        self.modes.setdefault("reverted", self._mode())

    @hookimpl
    def rsdrill_phase(self, name: str) -> None:
        if name == "teardown":
            self.modes["teardown"] = self._mode()


@dataclass
class Ran:
    result: Result
    modes: dict[str, str]
    events: list[str]
    journal: list[dict[str, Any]]


def _run(tmp_path: Path, *, balancer: bool = True, terminate: bool = False) -> Ran:
    experiment = Experiment.model_validate({
        "name": "stop-balancer", "target": {**TARGET, "balancer": balancer}, "probes": PROBES,
        "faults": [{"at": "1s", **FREEZE, "duration": "2s"}],
        "observe": {"after_revert": "10s"}, "guards": {"stop_balancer": True},
    })  # fmt: skip
    out = tmp_path / "out"
    watch = BalancerWatch(out, terminate=terminate)
    events: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: events.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("rsdrill.run")
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        result = run_experiment(experiment, RunOptions(out_dir=out, live=False,
                                                       journal_dir=tmp_path / "journal",
                                                       plugins=(watch,)))  # fmt: skip
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    (journal,) = (tmp_path / "journal").glob("*.jsonl")
    return Ran(result, watch.modes, events, read_records(journal))


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    return _run(tmp_path_factory.mktemp("held"))


@pytest.fixture(scope="module")
def already_off(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    return _run(tmp_path_factory.mktemp("off"), balancer=False)


def test_the_balancer_is_off_while_the_faults_run_and_on_again_after(held: Ran) -> None:
    assert held.result.verdict == "pass", held.result.error
    # Stopped before the fault, still stopped once the fault is reverted (it is the run's
    # hold, not the fault's), started again when the run reverts everything.
    assert held.modes == {"fault": "off", "reverted": "off", "teardown": "full"}


def test_the_result_events_and_journal_say_what_was_done(held: Ran) -> None:
    assert held.result.verdict == "pass", held.result.error
    balancer = held.result.balancer
    assert balancer is not None and balancer.mode_before == "full"
    assert balancer.stopped_at is not None and balancer.restored_at is not None
    assert balancer.stopped_at < balancer.restored_at
    assert held.result.faults[0].injected_at_s is not None
    assert any(e.startswith("balancer: mode full before the run: stopped") for e in held.events)
    assert any(e.startswith("balancer: started again") for e in held.events)
    # Journaled before it was stopped, released once started again; the run ended.
    owed = [r for r in held.journal if r.get("key") == KEY]
    assert [r["type"] for r in owed] == ["resource", "released"]
    assert owed[0]["revert"]["action"] == REVERT_ACTION
    assert owed[0]["revert"]["routers"] == [held.result.target.uri.split("//")[1].rstrip("/")]
    assert held.journal[-1]["type"] == "end"


def test_a_balancer_already_off_is_left_off(already_off: Ran) -> None:
    assert already_off.result.verdict == "pass", already_off.result.error
    assert already_off.modes == {"fault": "off", "reverted": "off", "teardown": "off"}
    balancer = already_off.result.balancer
    assert balancer is not None and balancer.mode_before == "off"
    assert balancer.stopped_at is None and balancer.restored_at is None
    assert any("balancer: mode off before the run" in e and "left as it is" in e
               for e in already_off.events)  # fmt: skip
    assert not [r for r in already_off.journal if r.get("key") == KEY]


def test_a_sigterm_mid_fault_restores_the_balancer(tmp_path: Path) -> None:
    ran = _run(tmp_path, terminate=True)
    assert ran.result.verdict == "aborted", ran.result.error
    assert ran.modes == {"fault": "off", "reverted": "off", "teardown": "full"}
    assert ran.result.balancer is not None and ran.result.balancer.restored_at is not None


@pytest.fixture
def kept(tmp_path: Path) -> Iterator[Path]:
    """Where the killed run's kept cluster is; taken down after the test."""
    out = tmp_path / "out"
    yield out
    if (out / "sandbox").exists():
        ShardedSandbox(out / "sandbox").down()


def test_recover_starts_the_balancer_a_killed_run_stopped(tmp_path: Path, kept: Path) -> None:
    path = tmp_path / "exp.yaml"
    target = ", ".join(f"{k}: {v}" for k, v in {**TARGET, "keep": "true"}.items())
    path.write_text(
        f"name: stop-balancer-killed\ntarget: {{{target}}}\n"
        "probes: {lag: null, durability: null}\n"
        "faults:\n  - {at: 1s, kind: host-freeze, select: {shard: shard0, role: secondary}, "
        "duration: 120s}\n"
        "guards: {stop_balancer: true}\n"
    )
    proc = _start(tmp_path, path)
    try:
        _wait_for_text(proc, "injected host-freeze", 120)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        uri = ShardedSandbox(kept / "sandbox").uri
        assert balancer_mode(uri) == "off"  # left off by the killed run
        recover = _recover(tmp_path, timeout=120)
        assert recover.returncode == 0, recover.stdout + recover.stderr
        assert "balancer started again" in recover.stdout, recover.stdout
        assert balancer_mode(uri) == "full"
        # Nothing is owed any more.
        again = _recover(tmp_path, timeout=60)
        assert again.returncode == 0 and "nothing to recover" in again.stdout, again.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
