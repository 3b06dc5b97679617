"""The catalog's zones-5-2-2-1-lose-one, compressed (1 s elections, 200 ms heartbeats, the zone
lost for 4 s): five members over zones a, b, c, a, b with priorities 2, 1, 0.5, 2, 1. MongoDB's
rules: the three members left hold the majority, so a new primary comes within the election
bound and no w:majority write is lost; once zone a is back and caught up, priority takeovers
bring the primary back to one of its members. With equal priorities nobody takes it back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.result import Result
from rsdrill.sandbox.config import ReplSetSpec, member_dir
from rsdrill.sandbox.groundtruth import read_events
from tests.e2e.catalog import catalog


def _run(tmp_path: Path, after_revert: str = "6s", **target: Any) -> Result:
    document = catalog("zones-5-2-2-1-lose-one", **target)
    document["observe"] = {"after_revert": after_revert, "until_recovered": False}
    options = RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path)
    return run_experiment(Experiment.model_validate(document), options)


def _events(tmp_path: Path, *kinds: str) -> list[dict[str, Any]]:
    """Every member's events of these kinds, in time order, with the member's zone and host."""
    directory = tmp_path / "out" / "sandbox"
    chosen = [
        {**e, "zone": member.zone, "host": member.host}
        for member in ReplSetSpec.read(directory).members
        for e in read_events(member_dir(directory, member) / "events.jsonl")
        if e["event"] in kinds
    ]
    return sorted(chosen, key=lambda e: e["t_mono"])


def _elections(tmp_path: Path) -> list[dict[str, Any]]:
    return _events(tmp_path, "election_called")


def _story(tmp_path: Path, since: float) -> list[str]:
    """What each member did about the primary from `since` on: for a failure's message."""
    kinds = ("election_called", "election_won", "election_lost", "dry_run_lost", "state")
    return [
        f"{e['t_mono'] - since:+.2f}s {e['zone']} {e['host']} {e['event']} "
        + " ".join(f"{k}={e[k]}" for k in ("reason", "state", "term", "votes") if k in e)
        for e in _events(tmp_path, *kinds)
        if e["t_mono"] > since - 5
    ]


def test_the_preferred_zone_takes_the_primary_back_by_priority(tmp_path: Path) -> None:
    # A takeover's real election is refused while a voter holds a write the candidate has not
    # applied yet, and the primary it deposed is gone until the next election timeout: each
    # refused try costs about 2.2 s here (timeout, then the takeover delay again). Three in a
    # row were seen on a loaded machine; 15 s leaves room for six.
    result = _run(tmp_path, after_revert="15s")
    assert result.exit_code == 0, result.error
    m = result.metrics
    assert m.failover_s is not None and m.failover_s < 5.0, m  # 1 s elections; generous
    assert m.lost_acknowledged_writes == 0, m
    healed = (result.clock.t0_monotonic if result.clock else 0.0) + min(
        f.reverted_at_s or 0.0 for f in result.faults
    )
    story = "\n".join(_story(tmp_path, healed))
    after = [(e["zone"], e["reason"]) for e in _elections(tmp_path) if e["t_mono"] > healed]
    # Priorities move the primary, but the last step need not be zone a's own takeover:
    # rehearsal CI79 saw zone b stand twice by priority, then zone a win by its election
    # timeout (a takeover's election deposes the primary, so for a while there was none to take
    # over from, as with mongod). With equal priorities (below) nobody stands at all.
    assert any(reason == "priority takeover" for _, reason in after), story
    won = [e["zone"] for e in _events(tmp_path, "election_won") if e["t_mono"] > healed]
    assert "a" in won, story
    final = [m for m in result.metrics.member_states.items() if m[1] and m[1][-1][1] == "PRIMARY"]
    zones = {s.host: s.zone for s in ReplSetSpec.read(tmp_path / "out" / "sandbox").members}
    assert [zones[host] for host, _ in final] == ["a"], (final, story)


def test_with_equal_priorities_nobody_takes_the_primary_back(tmp_path: Path) -> None:
    result = _run(tmp_path, priorities=[1, 1, 1, 1, 1])
    assert result.exit_code == 0, result.error
    assert all(e["reason"] != "priority takeover" for e in _elections(tmp_path))
