"""The guards' rules, on schedules, replSetGetStatus documents and oplog readings made by hand."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest
from bson.timestamp import Timestamp

from rsdrill.domains import placement
from rsdrill.engine.guards import (
    GuardRefusal,
    OplogWindow,
    check_allowlist,
    check_domains,
    check_oplog_window,
    check_quorum,
    majority,
    max_concurrent_down,
    max_lag,
    member_problems,
    oplog_window,
    planned_outages,
)
from rsdrill.experiment.schema import Fault, make_fault

MB = 1024 * 1024


def kill(at: float, duration: float, select: Any = "primary", **extra: Any) -> Fault:
    return make_fault(at=at, kind="host-kill", select=select, duration=duration, **extra)


def freeze(at: float, duration: float, select: Any = "secondary") -> Fault:
    return make_fault(at=at, kind="host-freeze", select=select, duration=duration)


# -- quorum: the schedule → the most members down at once ----------------------------------------


def test_no_fault_taking_a_member_down_means_none_down() -> None:
    worst = max_concurrent_down(
        [make_fault(at=1, kind="stepdown"), make_fault(at=2, kind="stepdown")]
    )
    assert (worst.members, worst.at_s, worst.faults) == (0, None, ())


def test_overlapping_faults_add_up_from_the_later_injection() -> None:
    worst = max_concurrent_down([kill(2, 5), freeze(4, 2)])
    assert (worst.members, worst.at_s, worst.faults) == (2, 4, (0, 1))


def test_a_fault_reverted_when_the_next_begins_does_not_overlap_it() -> None:
    assert max_concurrent_down([kill(2, 3), kill(5, 3)]).members == 1


def test_restart_after_counts_rather_than_duration() -> None:
    faults = [kill(0, 1, restart={"after": 10}), freeze(5, 1)]
    assert max_concurrent_down(faults).members == 2


def test_a_member_never_restarted_stays_down_for_every_later_fault() -> None:
    faults = [make_fault(at=0, kind="host-kill", restart=False), freeze(100, 1)]
    assert max_concurrent_down(faults).members == 2


def test_count_selections_count_each_member() -> None:
    worst = max_concurrent_down([freeze(1, 2, select={"count": 2, "role": "secondary"})])
    assert worst.members == 2


def test_the_same_named_member_counts_once_and_different_ones_each() -> None:
    same = [kill(0, 10, select={"member": "h:1"}), freeze(2, 2, select={"member": "h:1"})]
    assert max_concurrent_down(same).members == 1
    different = [kill(0, 10, select={"member": "h:1"}), freeze(2, 2, select={"member": "h:2"})]
    assert max_concurrent_down(different).members == 2


def test_the_earliest_worst_moment_is_reported() -> None:
    faults = [kill(0, 3), freeze(1, 1), kill(10, 3), freeze(11, 1)]
    assert max_concurrent_down(faults).at_s == 1


@pytest.mark.parametrize(("voting", "needed"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_majority_of_the_voting_members(voting: int, needed: int) -> None:
    assert majority(voting) == needed


def test_one_of_three_down_keeps_the_quorum() -> None:
    assert check_quorum([kill(2, 5)], 3, allowed=False).startswith("ok (at most 1 member")


def test_two_of_three_down_at_once_is_refused() -> None:
    with pytest.raises(GuardRefusal) as refused:
        check_quorum([kill(2, 5), freeze(4, 2)], 3, allowed=False)
    assert refused.value.guard == "quorum"
    assert str(refused.value) == (
        "quorum guard: from 4s, faults[0] and faults[1] take 2 members down at once, leaving "
        "1 of the 3 voting members up: fewer than the majority of 2 needed to elect a primary. "
        "Set `guards: {allow_quorum_loss: true}` to run it anyway"
    )


def test_the_only_member_of_rs1_down_is_a_quorum_loss_unless_allowed() -> None:
    with pytest.raises(GuardRefusal, match="faults\\[0\\] takes 1 member down at once"):
        check_quorum([kill(2, 30)], 1, allowed=False)
    assert "allowed by guards.allow_quorum_loss" in check_quorum([kill(2, 30)], 1, allowed=True)


def test_five_voters_survive_two_down_but_not_three() -> None:
    two = [freeze(1, 5, select={"count": 2})]
    assert check_quorum(two, 5, allowed=False).startswith("ok")
    with pytest.raises(GuardRefusal):
        check_quorum([*two, kill(2, 1)], 5, allowed=False)


# -- oplog window --------------------------------------------------------------------------------


def test_planned_outages_are_the_times_members_stay_down_before_catching_up() -> None:
    faults = [
        kill(0, 30),
        kill(0, 30, restart={"after": 5}),
        kill(0, 30, restart={"volume": "wipe"}),  # an initial sync, whatever the oplog
        make_fault(at=0, kind="host-kill", restart=False),
        freeze(0, 7),
        freeze(0, 9, select="arbiter"),  # no oplog to fall off
        make_fault(at=0, kind="stepdown"),
    ]
    assert planned_outages(faults) == [(0, 30), (1, 5), (3, math.inf), (4, 7)]


def full(span_s: float) -> OplogWindow:
    return OplogWindow(span_s=span_s, size_bytes=MB, max_bytes=MB)


@pytest.mark.parametrize(("size", "is_full"), [(0, False), (0.79, False), (0.8, True), (1.2, True)])
def test_an_oplog_is_full_from_80_percent_of_its_cap(size: float, is_full: bool) -> None:
    assert OplogWindow(10, int(size * 100 * MB), 100 * MB).full is is_full


def test_an_outage_shorter_than_a_full_window_passes() -> None:
    assert check_oplog_window([kill(0, 30)], full(31), allowed=False) == (
        "ok (longest outage 30s < window 31s)"
    )


@pytest.mark.parametrize("span", [30, 29.9, 0])
def test_an_outage_as_long_as_a_full_window_or_longer_is_refused(span: float) -> None:
    with pytest.raises(GuardRefusal) as refused:
        check_oplog_window([freeze(0, 1), kill(0, 30)], full(span), allowed=False)
    assert str(refused.value) == (
        f"oplog window guard: faults[1] (host-kill) keeps a member down for 30s, not less than "
        f"the primary's oplog window of {span:g}s (100% of 1.0 MB used): the member would fall "
        "off the oplog and need a full initial sync. Set `guards: {allow_oplog_overrun: true}` "
        "to run it anyway"
    )


def test_a_member_never_restarted_overruns_any_full_window() -> None:
    with pytest.raises(GuardRefusal, match="keeps a member down for good"):
        check_oplog_window(
            [make_fault(at=0, kind="host-kill", restart=False)], full(1e9), allowed=False
        )


def test_an_overrun_can_be_allowed() -> None:
    assert "allowed" in check_oplog_window([kill(0, 30)], full(1), allowed=True)


def test_an_oplog_not_yet_full_or_unreadable_is_not_checked() -> None:
    young = OplogWindow(span_s=1, size_bytes=MB, max_bytes=100 * MB)
    assert check_oplog_window([kill(0, 30)], young, allowed=False).startswith(
        "not checked: the primary's oplog is not full yet (1% of 100.0 MB used)"
    )
    unknown = check_oplog_window([kill(0, 30)], None, allowed=False, unknown="no collStats")
    assert unknown == "WARNING, not checked: the oplog window cannot be known (no collStats)"


def test_no_outage_needs_no_window() -> None:
    assert check_oplog_window(
        [make_fault(at=0, kind="stepdown")], full(0), allowed=False
    ).startswith("ok")


class FakeMember:
    """Answers commands from a table, as DirectConnection.command does."""

    host = "h:1"

    def __init__(self, replies: dict[tuple[str, Any], dict[str, Any]]) -> None:
        self.replies = replies

    def command(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        name = next(iter(cmd))
        key = (name, cmd.get("sort", {}).get("$natural")) if name == "find" else (name, None)
        return self.replies[key]


def edges(first: dict[str, Any], last: dict[str, Any]) -> dict[tuple[str, Any], dict[str, Any]]:
    return {
        ("collStats", None): {"ok": 1.0, "size": 95, "maxSize": 100},
        ("find", 1): {"ok": 1.0, "cursor": {"firstBatch": [first]}},
        ("find", -1): {"ok": 1.0, "cursor": {"firstBatch": [last]}},
    }


def test_the_window_is_read_like_get_replication_info() -> None:
    t0 = dt.datetime(2024, 5, 1, 12, 0, 0)
    conn = FakeMember(edges(
        {"ts": Timestamp(100, 1), "wall": t0},
        {"ts": Timestamp(190, 4), "wall": t0 + dt.timedelta(seconds=90.25)},
    ))  # fmt: skip
    window, why = oplog_window(conn)  # type: ignore[arg-type]
    assert (window, why) == (OplogWindow(90.25, 95, 100), "")
    assert window is not None and window.full


def test_entries_without_wall_dates_use_their_timestamps() -> None:
    conn = FakeMember(edges({"ts": Timestamp(100, 1)}, {"ts": Timestamp(160, 9)}))
    window, _ = oplog_window(conn)  # type: ignore[arg-type]
    assert window is not None and window.span_s == 60


def test_an_unreadable_oplog_gives_no_window_and_says_why() -> None:
    replies = edges({"ts": Timestamp(1, 1)}, {"ts": Timestamp(2, 1)})
    replies[("collStats", None)] = {"ok": 0.0, "errmsg": "not authorized on local"}
    assert oplog_window(FakeMember(replies)) == (None, "not authorized on local")  # type: ignore[arg-type]
    replies = edges({"ts": Timestamp(1, 1)}, {"ts": Timestamp(2, 1)})
    replies[("find", 1)] = {"ok": 1.0, "cursor": {"firstBatch": []}}
    assert oplog_window(FakeMember(replies)) == (None, "the oplog is empty")  # type: ignore[arg-type]


# -- member health and lag -----------------------------------------------------------------------

NOW = dt.datetime(2024, 5, 1, 12, 0, 0)


def member(name: str, state: str, behind_s: float | None = 0.0, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "stateStr": state, "health": 1.0, **extra}
    if behind_s is not None:
        doc["lastAppliedWallTime"] = NOW - dt.timedelta(seconds=behind_s)
    return doc


def status(*members: dict[str, Any]) -> dict[str, Any]:
    return {"members": [member("p:1", "PRIMARY", self=True), *members]}


def test_a_healthy_caught_up_set_has_no_problem() -> None:
    healthy = status(member("s:2", "SECONDARY", 0.5), member("a:3", "ARBITER", None))
    assert member_problems(healthy, 10) == []
    assert max_lag(healthy) == 0.5


def test_unreachable_and_unhealthy_members_are_named() -> None:
    sick = status(
        member("s:2", "SECONDARY", health=0.0),
        member("s:3", "RECOVERING"),
        member("s:4", "STARTUP2", None),
    )
    assert member_problems(sick, 10) == [
        "s:2 is unreachable from the primary (health 0, SECONDARY)",
        "s:3 is RECOVERING",
        "s:4 is STARTUP2",
    ]


def test_lag_above_the_limit_is_a_problem_and_at_the_limit_is_not() -> None:
    lagging = status(member("s:2", "SECONDARY", 12.34), member("s:3", "SECONDARY", 10.0))
    assert member_problems(lagging, 10) == [
        "s:2 lags 12.3s behind the primary (guards.max_lag_before_start: 10s)"
    ]
    assert max_lag(lagging) == pytest.approx(12.34)


def test_a_secondary_whose_position_is_unknown_is_a_problem() -> None:
    assert member_problems(status(member("s:2", "SECONDARY", None)), 10) == [
        "s:2: the primary does not report its lastAppliedWallTime"
    ]


# -- allowlist -----------------------------------------------------------------------------------


def allow(value: str | None, yes: bool = False, answer: bool | None = None) -> str:
    asked: list[str] = []

    def confirm(question: str) -> bool:
        asked.append(question)
        assert answer is not None
        return answer

    ask = None if answer is None else confirm
    outcome = check_allowlist("rs0", value, assume_yes=yes, confirm=ask, question="Go?")
    assert asked == ([] if answer is None else ["Go?"])
    return outcome


def test_a_listed_set_is_allowed_without_asking() -> None:
    assert allow("staging, rs0", answer=None) == "ok ('rs0' is in RSDRILL_ALLOW)"


@pytest.mark.parametrize(("value", "listed"), [("staging,qa", "staging, qa"), ("", "empty")])
def test_a_set_not_listed_is_refused_even_with_yes(value: str, listed: str) -> None:
    with pytest.raises(GuardRefusal) as refused:
        allow(value, yes=True)
    assert str(refused.value) == (
        f"allowlist guard: replica set 'rs0' is not in RSDRILL_ALLOW ({listed}); add it there "
        "to run experiments against it"
    )


def test_without_an_allowlist_yes_or_a_confirmation_allows() -> None:
    assert allow(None, yes=True) == "ok (--yes)"
    assert allow(None, answer=True) == "ok (confirmed)"


def test_without_an_allowlist_a_no_or_no_terminal_refuses() -> None:
    with pytest.raises(GuardRefusal, match="not confirmed: replica set 'rs0' left alone"):
        allow(None, answer=False)
    with pytest.raises(GuardRefusal) as refused:
        allow(None)
    assert str(refused.value) == (
        "allowlist guard: replica set 'rs0' is not a sandbox of this run and there is no "
        "terminal to confirm on: list it in RSDRILL_ALLOW (e.g. RSDRILL_ALLOW=rs0) or pass --yes"
    )


def test_a_zone_counts_its_voting_members_down_and_a_zone_nobody_is_in_is_refused() -> None:
    placed = [placement("a:1", 1, {"zone": "east", "region": "eu", "rack": "r1"}),
              placement("a:2", 1, {"zone": "east", "region": "eu", "rack": "r2"}),
              placement("a:3", 1, {"zone": "west", "region": "us", "rack": "r1"}),
              placement("a:4", 0, {"zone": "west", "region": "us"})]  # fmt: skip
    assert max_concurrent_down([kill(5, 10, {"zone": "east"})], placed).members == 2
    assert max_concurrent_down([kill(5, 10, {"zone": "west"}),
                                kill(8, 10, "primary")], placed).members == 2  # fmt: skip
    with pytest.raises(GuardRefusal, match="leaving 1 of the 3 voting members"):
        check_quorum([kill(5, 10, {"zone": "east"})], 3, allowed=False, placed=placed)
    assert check_quorum([kill(5, 10, {"zone": "west"})], 3, allowed=False, placed=placed)
    check_domains([kill(5, 10, {"zone": "west"})], placed)
    with pytest.raises(GuardRefusal, match=r"no member is in zone north .*zones: east, west"):
        check_domains([kill(1, 1), kill(5, 10, {"zone": "north"})], placed)
    # A region, and tags (all of them): the voting members among them count.
    assert max_concurrent_down([kill(5, 10, {"region": "us"})], placed).members == 1
    assert max_concurrent_down([kill(5, 10, {"tag": {"rack": "r1"}})], placed).members == 2
    assert (
        max_concurrent_down([kill(5, 10, {"tag": {"rack": "r1", "zone": "east"}})], placed).members
        == 1
    )
    with pytest.raises(GuardRefusal, match=r"select.region: no member is in region ap .*eu, us"):
        check_domains([kill(5, 10, {"region": "ap"})], placed)
    with pytest.raises(GuardRefusal, match=r"select.tag: no member is in tag rack=r9 .*rack=r1"):
        check_domains([kill(5, 10, {"tag": {"rack": "r9"}})], placed)
    # A zone named by what its loss costs: the majority's two voters, the minority's one.
    majority = kill(5, 10, {"domains": "majority"})
    assert max_concurrent_down([majority], placed).members == 2
    assert max_concurrent_down([kill(5, 10, {"domains": "minority"})], placed).members == 1
    with pytest.raises(GuardRefusal, match="leaving 1 of the 3 voting members"):
        check_quorum([majority], 3, allowed=False, placed=placed)
    spread = [placement(f"b:{i}", 1, {"zone": z}) for i, z in enumerate("abc")]
    with pytest.raises(GuardRefusal, match=r"select.domains: no zone holds a majority of the 3"):
        check_domains([majority], spread)


def test_a_zone_cut_off_is_out_of_reach_and_a_zone_killed_is_down() -> None:
    placed = [placement("a:1", 1, {"zone": "east"}), placement("a:2", 1, {"zone": "east"}),
              placement("a:3", 1, {"zone": "west"})]  # fmt: skip

    def outage(way: str) -> Fault:
        return make_fault(at=5, kind="zone-outage", select={"zone": "east"}, duration=10, way=way)

    with pytest.raises(GuardRefusal, match=r"cuts 2 members off at once, leaving 1 of the 3 "
                       r"voting members reachable: .* no client can write"):  # fmt: skip
        check_quorum([outage("isolate")], 3, allowed=False, placed=placed)
    with pytest.raises(GuardRefusal, match="takes 2 members down at once, leaving 1 of the 3 "
                       "voting members up"):  # fmt: skip
        check_quorum([outage("kill")], 3, allowed=False, placed=placed)
