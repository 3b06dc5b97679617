"""failover_s, failover_parts and no_primary_s from hand-written histories."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsdrill.analysis.failover import failover_parts, find_failover, no_primary_s
from rsdrill.history import FaultRecord, Op

A, B, C = "a:27017", "b:27017", "c:27017"


def hello(member: str, t_start: float, writable: bool | None, dur: float = 0.01) -> Op:
    """A failover poll; writable None means the member did not answer."""
    if writable is None:
        return Op("failover", "hello", member, t_start, t_start + 0.25, "timeout", {"error": "x"})
    detail = {"writable": writable, "secondary": not writable, "primary": None}
    return Op("failover", "hello", member, t_start, round(t_start + dur, 6), "ok", detail)


def polls(member: str, start: float, stop: float, writable: bool | None) -> list[Op]:
    """Polls every 0.1 s in [start, stop)."""
    n = round((stop - start) / 0.1)
    return [hello(member, round(start + 0.1 * k, 6), writable) for k in range(n)]


def kill(at: float, target: str = A, index: int = 0) -> FaultRecord:
    return FaultRecord(index, "host-kill", target, injected_at_s=at, verified_at_s=at + 0.1)


def status(member: str, t: float, state: str, term: int, election: dict | None = None) -> Op:
    detail: dict = {"state": state, "term": term}
    if election is not None:
        detail["election"] = election
    return Op("recovery", "status", member, t, t + 0.01, "ok", detail)


def write(t_start: float, member: str | None, ok: bool = True) -> Op:
    if ok:
        return Op("write", "insert", member, t_start, t_start + 0.005, "ok", {"seq": 1})
    return Op("write", "insert", None, t_start, t_start + 0.25, "timeout", {"seq": 1})


def rs3_primary_kill() -> list[Op]:
    """A primary until killed at 5.0; B writable from its poll starting at 15.0."""
    return [
        *polls(A, 1.0, 5.0, True),
        *polls(A, 5.0, 30.0, None),
        *polls(B, 1.0, 15.0, False),
        *polls(B, 15.0, 30.0, True),
        *polls(C, 1.0, 30.0, False),
    ]


def test_failover_is_the_midpoint_of_the_new_primarys_last_no_and_first_yes() -> None:
    failover = find_failover(rs3_primary_kill(), [kill(5.0)])
    assert failover is not None
    assert (failover.old_primary, failover.new_primary) == (A, B)
    # B's last not-writable poll ended at 14.91, its first writable one started at 15.0.
    assert failover.writable_at_s == pytest.approx(14.955)
    assert failover.seconds == pytest.approx(9.955)


def test_a_prev_poll_before_the_injection_gives_the_first_polls_start() -> None:
    ops = [hello(A, 4.9, True), hello(B, 4.9, False), hello(B, 5.05, True)]
    failover = find_failover(ops, [kill(5.0)])
    assert failover is not None
    assert failover.seconds == pytest.approx(0.05)


def test_jittered_polls_use_the_actual_neighbours() -> None:
    ops = [
        hello(A, 4.93, True),
        hello(B, 13.1, False),
        hello(B, 14.3, False, dur=0.03),
        hello(B, 15.2, True, dur=0.002),
        hello(C, 15.21, False),
    ]
    failover = find_failover(ops, [kill(5.0)])
    assert failover is not None
    assert failover.writable_at_s == pytest.approx((14.33 + 15.2) / 2)
    assert failover.seconds == pytest.approx(9.765)


def _elected(op: Op, term: int) -> Op:
    return Op(op.probe, op.op, op.member, op.t_start, op.t_end, op.outcome,
              {**op.detail, "election_id": f"7fffffff00000000000000{term:02d}"})  # fmt: skip


def test_rs1_whose_member_comes_back_is_no_failover() -> None:
    """Not even for the new term it elects itself for: no other member could have won."""
    ops = [*(_elected(op, 1) for op in polls(A, 1.0, 5.0, True)), *polls(A, 5.0, 35.0, None),
           *(_elected(op, 2) for op in polls(A, 35.0, 40.0, True))]  # fmt: skip
    fault = kill(5.0)
    fault.reverted_at_s = 30.0
    assert find_failover(ops, [fault]) is None


def test_the_old_primary_elected_again_for_a_new_term_is_a_failover() -> None:
    """A's pod re-created at once: A is back as a secondary at 6.0 and wins the election (term
    2) at 9.0. Its polls carry the term's electionId; B and C could have won."""
    ops = [
        *(_elected(op, 1) for op in polls(A, 1.0, 5.0, True)),
        *polls(A, 5.0, 6.0, None),
        *polls(A, 6.0, 9.0, False),
        *(_elected(op, 2) for op in polls(A, 9.0, 12.0, True)),
        *polls(B, 1.0, 12.0, False),
        *polls(C, 1.0, 12.0, False),
    ]
    failover = find_failover(ops, [kill(5.0)])
    assert failover is not None and (failover.old_primary, failover.new_primary) == (A, A)
    assert failover.writable_at_s == pytest.approx(8.955)
    # The same term all along (no election), or no term reported: no failover.
    same = [_elected(op, 1) if op.detail.get("election_id") else op for op in ops]
    assert find_failover(same, [kill(5.0)]) is None
    assert find_failover([*polls(A, 1.0, 12.0, True), *polls(B, 1.0, 12.0, False)],
                         [kill(5.0)]) is None  # fmt: skip


def test_no_known_primary_before_the_fault_is_no_failover() -> None:
    ops = [*polls(B, 1.0, 5.0, False), *polls(B, 5.0, 10.0, True)]
    assert find_failover(ops, [kill(5.0)]) is None


def test_no_fault_or_no_polls_is_no_failover() -> None:
    assert find_failover(rs3_primary_kill(), []) is None
    assert find_failover([], [kill(5.0)]) is None
    assert find_failover(rs3_primary_kill(), [FaultRecord(0, "host-kill", A)]) is None


def test_a_secondary_fault_then_a_primary_fault_charges_the_primary_fault() -> None:
    ops = [
        *polls(A, 1.0, 30.0, True),
        *polls(A, 30.0, 50.0, None),
        *polls(B, 1.0, 41.0, False),
        *polls(B, 41.0, 50.0, True),
        *polls(C, 1.0, 5.0, False),
        *polls(C, 5.0, 50.0, None),
    ]
    faults = [kill(5.0, target=C, index=0), kill(30.0, target=A, index=1)]
    failover = find_failover(ops, faults)
    assert failover is not None
    assert failover.fault.index == 1
    assert failover.seconds == pytest.approx(40.955 - 30.0)


def test_two_failovers_report_the_first() -> None:
    ops = [
        *polls(A, 1.0, 5.0, True),
        *polls(A, 5.0, 50.0, None),
        *polls(B, 1.0, 15.0, False),
        *polls(B, 15.0, 30.0, True),
        *polls(B, 30.0, 50.0, None),
        *polls(C, 1.0, 42.0, False),
        *polls(C, 42.0, 50.0, True),
    ]
    failover = find_failover(ops, [kill(30.0, target=B, index=1), kill(5.0, index=0)])
    assert failover is not None
    assert (failover.fault.index, failover.new_primary) == (0, B)
    assert failover.seconds == pytest.approx(9.955)


def test_failover_parts_split_the_failover() -> None:
    ops = [
        *rs3_primary_kill(),
        status(A, 4.0, "PRIMARY", 1, {"term": 1, "called_s": 0.5, "new_term_s": 0.6}),
        status(B, 4.0, "SECONDARY", 1),
        # Stale metrics from B's earlier term must not be taken for this election.
        status(B, 13.0, "SECONDARY", 1, {"term": 1, "called_s": 0.1}),
        status(B, 15.5, "PRIMARY", 2, {"term": 2, "called_s": 12.0, "new_term_s": 12.4}),
        status(B, 16.5, "PRIMARY", 2, {"term": 2, "called_s": 99.0}),
        write(4.9, A),
        write(5.0, None, ok=False),
        write(14.9, None, ok=False),
        write(14.96, A),  # served by the old primary: not the new one's first write
        write(15.3, B),
        write(15.4, B),
    ]
    failover = find_failover(ops, [kill(5.0)])
    assert failover is not None
    parts = failover_parts(ops, failover)
    assert parts.detection_s == pytest.approx(7.0)
    assert parts.election_s == pytest.approx(14.955 - 12.0)
    assert parts.client_rediscovery_s == pytest.approx(15.305 - 14.955)
    total = parts.detection_s + parts.election_s  # type: ignore[operator]
    assert total == pytest.approx(failover.seconds)


def test_failover_parts_are_none_without_their_data() -> None:
    failover = find_failover(rs3_primary_kill(), [kill(5.0)])
    assert failover is not None
    parts = failover_parts(rs3_primary_kill(), failover)
    assert (parts.detection_s, parts.election_s, parts.client_rediscovery_s) == (None, None, None)


def test_without_status_before_the_fault_any_election_after_it_counts() -> None:
    ops = [*rs3_primary_kill(), status(B, 15.5, "PRIMARY", 2, {"term": 2, "called_s": 11.0})]
    failover = find_failover(ops, [kill(5.0)])
    assert failover is not None
    assert failover_parts(ops, failover).detection_s == pytest.approx(6.0)


def test_no_primary_is_the_longest_stretch_without_a_writable_poll() -> None:
    # A's last writable poll ended at 4.91; B's first writable poll ended at 15.01.
    assert no_primary_s(rs3_primary_kill()) == pytest.approx(10.1)


def awaited(
    member: str,
    t_start: float,
    t_end: float,
    writable: bool | None,
    *,
    was: bool,
    changed: bool = False,
    timeout: bool = False,
) -> Op:
    """A streamed (awaitable) hello from `t_start` to `t_end`; `was`: the member's writable
    state before; writable None: the stream broke (a timeout, or a closed socket)."""
    if writable is None:
        detail = {"error": "x", "awaited": True, "held_writable": was and not timeout}
        outcome = "timeout" if timeout else "error"
        return Op("failover", "hello", member, t_start, t_end, outcome, detail)
    detail = {"writable": writable, "secondary": not writable, "primary": None,
              "awaited": True, "changed": changed, "held_writable": was}  # fmt: skip
    return Op("failover", "hello", member, t_start, t_end, "ok", detail)


def streamed_primary_kill(*, frozen: bool) -> list[Op]:
    """Streams answering every 0.5 s: A primary, killed (or frozen) at 5.2; B is pushed to
    writable at 15.003 (asked at 15.0: its 0.5 s wait was cut short by the change)."""
    ops = [hello(A, 0.99, True), hello(B, 0.99, False), hello(C, 0.99, False)]
    for k in range(8):  # unchanged replies over [1.0, 5.0]
        ops += [awaited(m, 1.0 + 0.5 * k, 1.5 + 0.5 * k, m == A, was=m == A) for m in (A, B, C)]
    broken = 5.0 + 0.5 + 0.25 if frozen else 5.2  # a silence times out; a kill closes at once
    ops.append(awaited(A, 5.0, broken, None, was=True, timeout=frozen))
    for m in (B, C):
        ops += [awaited(m, 5.0 + 0.5 * k, 5.5 + 0.5 * k, False, was=False) for k in range(20)]
    ops.append(awaited(B, 15.0, 15.003, True, was=False, changed=True))
    return ops


def test_a_pushed_reply_dates_the_change_at_its_end() -> None:
    failover = find_failover(streamed_primary_kill(frozen=False), [kill(5.2)])
    assert failover is not None and failover.new_primary == B
    # Not the midpoint with B's last unchanged reply (ended 15.0), nor its send time (15.0).
    assert failover.writable_at_s == pytest.approx(15.003)


def test_a_stream_that_closes_held_its_state_until_then_a_silent_one_did_not() -> None:
    # Killed: A's socket closed at 5.2, so A was writable until then.
    assert no_primary_s(streamed_primary_kill(frozen=False)) == pytest.approx(15.003 - 5.2)
    # Frozen: after A's last reply (5.0) nothing is known; the window opens there.
    assert no_primary_s(streamed_primary_kill(frozen=True)) == pytest.approx(15.003 - 5.0)


def test_unchanged_replies_keep_a_quiet_primary_covered() -> None:
    # Replies every 0.5 s, each proving A writable over its whole span: no gap of 0.5 s.
    ops = [hello(A, 0.99, True)]
    ops += [awaited(A, 1.0 + 0.5 * k, 1.5 + 0.5 * k, True, was=True) for k in range(10)]
    assert no_primary_s(ops) == pytest.approx(0.0)
    # A reply missing from the record (here the one over [3.0, 3.5]) leaves its span open.
    assert no_primary_s([op for op in ops if op.t_start != 3.0]) == pytest.approx(0.5)


def test_no_primary_open_window_and_no_data() -> None:
    ops = [*polls(A, 1.0, 5.0, True), *polls(B, 1.0, 20.0, False)]
    assert no_primary_s(ops) == pytest.approx(19.91 - 4.91)
    assert no_primary_s([]) is None


@given(
    st.floats(0.0, 1.0),
    st.lists(st.tuples(st.floats(0.0, 0.3), st.floats(0.0005, 0.02)), min_size=2, max_size=100),
)
def test_property_failover_error_is_within_half_the_polls_interval(
    where: float, polls_: list[tuple[float, float]]
) -> None:
    # B polled back to back with jittered pauses and durations; each poll reads B's state at
    # the middle of its round trip, B being writable from `truth` on.
    starts, t = [], 0.01
    for pause, duration in polls_:
        starts.append((t + pause, duration))
        t += pause + duration
    reads = [s + d / 2 for s, d in starts]
    # min(): with where = 1.0, rounding could put truth just past the last read.
    truth = min(reads[0] + where * (reads[-1] - reads[0]), reads[-1])
    ops = [hello(A, -0.1, True)]
    ops += [hello(B, s, r >= truth, dur=d) for (s, d), r in zip(starts, reads, strict=True)]
    failover = find_failover(ops, [kill(0.0)])
    assert failover is not None
    first = next(op for op in ops[1:] if op.detail["writable"])
    prev = [op for op in ops[1:] if op.t_end <= first.t_start][-1:]
    interval = first.t_end - (prev[0].t_start if prev else 0.0)
    assert abs(failover.writable_at_s - truth) <= interval / 2 + 1e-9
