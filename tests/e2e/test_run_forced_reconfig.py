"""`recovery: {force_reconfig: {after}}` on a sandbox in two data centres (2+1): the majority
data centre is lost; MongoDB elects no primary until the survivor is reconfigured with force
`after` seconds later; once the faults are reverted the lost members are added back as
MongoDB's procedure says (without a vote, then their votes once SECONDARY), and the set is
whole again. The undo is also `rsdrill recover`'s; bad input and a schedule that loses no
majority are refused before anything is injected."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsdrill.connection import ConnectOptions
from rsdrill.engine.actions import ACTIONS
from rsdrill.engine.forced_reconfig import REVERT_ACTION
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.schema import Experiment
from rsdrill.history import History, Op
from rsdrill.result import Result
from rsdrill.sandbox.cluster import Sandbox
from rsdrill.sandbox.config import ReplSetSpec
from tests.harness.members import member_state, wait_until, wire_command

TARGET = {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s", "keep": True,
          "zones": ["east", "east", "west"]}  # fmt: skip
AFTER_S = 2.0
JOURNAL_INTERVAL_S = 0.1  # the sandbox's, as mongod's default commitIntervalMs


@pytest.fixture
def kept(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "out" / "sandbox"
    yield directory
    Sandbox(directory).down(grace_s=2.0)


def _run(tmp_path: Path, zone: str, *, runbook: bool = True) -> Result:
    spec: dict[str, Any] = {
        "name": "lose-majority-dc",
        "target": TARGET,
        "probes": {"availability": {"interval": "20ms"}},
        "faults": [{"at": "1s", "kind": "host-kill", "select": {"zone": zone}, "duration": "6s"}],
        "observe": {"after_revert": "2s"},
        "guards": {"allow_quorum_loss": True},
        "recovery": {"force_reconfig": {"after": f"{AFTER_S}s"}} if runbook else None,
    }
    options = RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path)
    return run_experiment(Experiment.model_validate(spec), options)


def _config(host: str) -> dict[str, Any]:
    return wire_command(host, {"replSetGetConfig": 1, "$db": "admin"})["config"]


def test_the_lost_majority_dc_is_recovered_by_the_forced_reconfig_and_healed(
    tmp_path: Path, kept: Path
) -> None:
    result = _run(tmp_path, "east")
    assert result.exit_code == 0, result.error
    members = ReplSetSpec.read(kept).members
    east, west = [m.host for m in members[:2]], members[2].host
    done = result.recovery
    assert done is not None and done.error is None, done
    assert done.loss_at_s == 1.0 and done.survivors == [west] and done.sent_to == west
    assert done.forced_at_s is not None and done.forced_at_s >= done.loss_at_s + AFTER_S
    assert done.version is not None and done.version > 10_000  # a forced config's jump
    # A set of one voter elects it at once (generous: a loaded machine).
    assert done.primary_at_s is not None and done.primary_at_s - done.forced_at_s < 5.0
    assert [r.host for r in done.re_added] == east
    for r in done.re_added:
        assert r.added_at_s is not None and r.secondary_at_s is not None
        assert r.restored_at_s is not None and r.added_at_s <= r.secondary_at_s <= r.restored_at_s
    # MongoDB's rule: no primary, so no write, from the loss until the forced reconfig.
    assert result.metrics.write_unavailable_s is not None
    assert result.metrics.write_unavailable_s >= AFTER_S - 0.1, result.metrics
    # The outage in parts: the runbook's wait, then the election and the clients' way back
    # (generous bounds: a loaded machine), summing to the RTO.
    rto = done.rto
    parts = (rto.detection_s, rto.decision_s, rto.election_s, rto.client_s)
    assert None not in parts and rto.rto_s is not None, rto
    assert abs(sum(parts) - rto.rto_s) < 0.01, rto
    assert rto.detection_s < 1.0 and rto.decision_s > AFTER_S - 1.0, rto
    assert AFTER_S <= rto.rto_s < AFTER_S + 6.0, rto
    # Whole again: every member in the config with its vote, healthy.
    config = _config(west)
    assert sorted((m["host"], m["votes"], m["priority"]) for m in config["members"]) == sorted(
        (m.host, 1, 1.0) for m in members
    )
    states = {s.name: s.state for s in Sandbox(kept).status()}
    assert sorted(states.values()) == ["PRIMARY", "SECONDARY", "SECONDARY"], states
    assert result.audit is not None and result.audit.consistent, result.audit
    # The report gives the outage in its parts, and each member's way back.
    report = (tmp_path / "out" / "report.html").read_text()
    assert 'id="recovery"' in report and "to the forced reconfig +" in report
    assert "to the clients&#x27; first write" in report or "to the clients' first write" in report
    assert report.count("its vote back at") == 2


def test_without_the_runbook_there_is_no_primary_until_the_majority_dc_returns(
    tmp_path: Path, kept: Path
) -> None:
    # MongoDB's rule: the survivor alone is no majority of the 3 votes, so it is never elected;
    # the set has a primary again only once the east members are back (6 s later).
    result = _run(tmp_path, "east", runbook=False)
    assert result.exit_code == 0, result.error
    assert result.recovery is None
    west = ReplSetSpec.read(kept).members[2].host
    [first, second] = sorted(result.faults, key=lambda f: f.target)
    back = min(first.reverted_at_s or 0.0, second.reverted_at_s or 0.0)
    primary_during = [t for t, state in result.metrics.member_states[west]
                      if state == "PRIMARY" and 1.0 <= t < back]  # fmt: skip
    assert primary_during == [], result.metrics.member_states[west]
    m = result.metrics
    assert m.no_primary_s is not None and m.no_primary_s >= back - 1.0 - 0.5, m
    assert m.write_unavailable_s is not None and m.write_unavailable_s >= back - 1.0 - 0.5, m


def test_the_writes_a_forced_reconfig_loses_are_those_the_members_added_back_roll_back(
    tmp_path: Path, kept: Path
) -> None:
    # West frozen from a second before the east data centre goes until after: the old
    # primary's w:1 writes of that second reach no survivor (thawed before the kill, west
    # fetched them all in the 80 ms the kill took). MongoDB's rule: the forced config's branch is
    # the set's, so the east members, added back, roll those writes back.
    spec = {
        "name": "lose-majority-dc-w1",
        "target": TARGET,
        "probes": {"availability": {"interval": "20ms", "write_concern": 1},
                   "durability": {"write_concern": 1}},
        "faults": [
            {"at": "1s", "kind": "host-freeze", "select": {"zone": "west"}, "duration": "1.5s"},
            {"at": "2s", "kind": "host-kill", "select": {"zone": "east"}, "duration": "6s"},
        ],
        "observe": {"after_revert": "2s"},
        "guards": {"allow_quorum_loss": True},
        "recovery": {"force_reconfig": {"after": f"{AFTER_S}s"}},
    }  # fmt: skip
    options = RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path)
    result = run_experiment(Experiment.model_validate(spec), options)
    assert result.exit_code == 0, result.error
    assert result.recovery is not None and result.recovery.loss_at_s == 2.0
    m = result.metrics
    assert m.lost_acknowledged_writes, m  # the RPO in writes: some were lost
    assert result.audit is not None and result.audit.consistent, result.audit
    rollbacks = result.audit.rollbacks
    rolled_back = sorted({s for r in rollbacks for a in r.acknowledged for s in a.seqs})
    lost = sorted(m.lost_acknowledged_seqs)
    assert rolled_back and set(rolled_back) <= set(lost), (rolled_back, lost)
    # A w:1 write is acknowledged before it is journaled: what the killed members acknowledged
    # in their last journal commit interval (MongoDB's 100 ms) is gone with them, lost without
    # a rollback (CI53: seq 97, acknowledged 6 ms after the kill began). Only those.
    kill = next(f for f in result.faults if f.kind == "host-kill")
    killed_at = kill.applied_at_s or kill.injected_at_s
    acked = {op.detail["seq"]: op.t_end for op in result_ops(tmp_path / "out", "write") if op.ok}
    vanished = sorted(set(lost) - set(rolled_back))
    late = {s: acked[s] for s in vanished}
    assert all(s > rolled_back[-1] and acked[s] >= killed_at - JOURNAL_INTERVAL_S - 0.1
               for s in vanished), (late, killed_at)  # fmt: skip


def result_ops(out: Path, probe: str) -> list[Op]:
    return History.read_jsonl(out / "history.jsonl").ops(probe)


def test_recover_adds_back_the_members_a_forced_reconfig_left_out(replset) -> None:
    # As `rsdrill recover` finds it after a run that died between the forced reconfig and the
    # heal: the set cut down to its survivor, the others back and REMOVED.
    sandbox = replset("rs3", zones=["east", "east", "west"])
    east, west = sandbox.spec.members[:2], sandbox.spec.members[2]
    wait_until(lambda: member_state(west.host) in ("PRIMARY", "SECONDARY"), 10, "a set")
    original = _config(west.host)["members"]
    for m in east:
        sandbox.kill(m)
    config = _config(west.host)
    config["members"] = [m for m in config["members"] if m["host"] == west.host]
    forced = {"replSetReconfig": config, "force": True, "$db": "admin"}
    assert wire_command(west.host, forced)["ok"] == 1.0
    for m in east:
        sandbox.start(m)
    action = {
        "action": REVERT_ACTION,
        "hosts": [m.host for m in sandbox.spec.members],
        "members": [{k: m[k] for k in ("_id", "host", "votes", "priority", "tags")}
                    for m in original if m["host"] != west.host],
        "connect": ConnectOptions().journaled(),
    }  # fmt: skip
    message = ACTIONS[REVERT_ACTION](action)
    assert message.endswith(", ".join(m.host for m in east)), message
    voters = sorted(m["host"] for m in _config(west.host)["members"] if m["votes"])
    assert voters == sorted(m.host for m in sandbox.spec.members)
    # Again: nothing is missing, nothing changes.
    assert ACTIONS[REVERT_ACTION](action).endswith("none was missing")


def test_a_schedule_that_keeps_the_majority_has_nothing_to_recover(
    tmp_path: Path, kept: Path
) -> None:
    result = _run(tmp_path, "west")
    assert (result.verdict, result.exit_code) == ("aborted", 3), result.error
    assert result.error is not None and "recovery.force_reconfig: the faults never leave" in (
        result.error
    )
    assert result.faults == []


@pytest.mark.parametrize(
    ("extra", "field", "problem"),
    [
        ("", "recovery.force_reconfig", "set `guards: {allow_quorum_loss: true}`"),
        ("guards: {allow_quorum_loss: true}\n", None, None),
    ],
)
def test_recovery_needs_the_quorum_loss_opt_in(extra: str, field: str | None,
                                               problem: str | None) -> None:  # fmt: skip
    text = (
        "name: r\ntarget: {platform: sandbox, topology: rs3, zones: [east, east, west]}\n"
        "faults:\n  - {at: 1s, kind: host-kill, select: {zone: east}, duration: 2s}\n"
        "recovery: {force_reconfig: {after: 60s}}\n" + extra
    )
    if field is None:
        assert load_experiment_text(text, "r.yaml", {}).recovery is not None
        return
    with pytest.raises(ExperimentError) as refused:
        load_experiment_text(text, "r.yaml", {})
    assert field in str(refused.value) and str(problem) in str(refused.value), refused.value


def test_recovery_on_a_set_of_one_is_bad_input() -> None:
    text = (
        "name: r\ntarget: {platform: sandbox, topology: rs1}\nguards: {allow_quorum_loss: true}\n"
        "faults:\n  - {at: 1s, kind: host-kill, duration: 2s}\n"
        "recovery: {force_reconfig: {after: 60s}}\n"
    )
    with pytest.raises(ExperimentError) as refused:
        load_experiment_text(text, "r.yaml", {})
    assert "recovery: a forced reconfig needs a replica set" in str(refused.value)


def test_the_plan_names_the_runbook_and_the_catalog_experiment_validates() -> None:
    from rsdrill.experiment.loader import load_experiment
    from rsdrill.experiment.plan import render_plan

    exp = load_experiment(Path(__file__).parents[2] / "experiments" / "dc2-1-lose-majority-dc.yaml")
    plan = render_plan(exp)
    assert "recovery: 60s after the faults leave fewer than a majority" in plan, plan
    assert "restart them on their kept data directory" in plan, plan
