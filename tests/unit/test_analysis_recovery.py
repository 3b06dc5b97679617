"""member_states and recovery_s from hand-written recovery-probe histories."""

from __future__ import annotations

import pytest

from rsdrill.analysis.recovery import member_states, recovery_s, restart_phases, too_stale
from rsdrill.history import FaultRecord, Op

A, B = "a:27017", "b:27017"


def status(member: str, t_start: float, state: str | None, dur: float = 0.02) -> Op:
    """A recovery poll; state None means the member did not answer."""
    if state is None:
        detail = {"error": "connection refused", "code": None, "type": "AutoReconnect"}
        return Op("recovery", "status", member, t_start, t_start + dur, "error", detail)
    return Op(
        "recovery", "status", member, t_start, t_start + dur, "ok", {"state": state, "term": 1}
    )


def fault(target: str, injected: float, reverted: float | None, index: int = 0) -> FaultRecord:
    return FaultRecord(index, "host-kill", target, injected, injected + 0.1, reverted)


def kill_and_restart() -> list[Op]:
    """A: SECONDARY, killed at 5.0, restarted at 20.0, back via STARTUP2 and RECOVERING."""
    return [
        status(A, 4.0, "SECONDARY"),
        status(A, 4.9, "SECONDARY"),
        status(A, 5.1, None),
        status(A, 10.0, None),
        status(A, 20.1, None),
        status(A, 21.0, "STARTUP2"),
        status(A, 25.0, "RECOVERING"),
        status(A, 29.9, "RECOVERING"),
        status(A, 30.0, "SECONDARY"),
        status(A, 31.0, "SECONDARY"),
        status(B, 4.0, "PRIMARY"),
        status(B, 31.0, "PRIMARY"),
    ]


def test_ha_phases_where_rsdrill_waited_the_boot_end_when_the_member_starts() -> None:
    """Sandbox or local: the host was restarted at 20.0 and booted 8 s (rsdrill's wait), so the
    member started at 28.0; healthy at 29.96 (the midpoint of its last RECOVERING and first
    SECONDARY polls). Its first answer (21.0, during the boot here) does not matter."""
    phases = restart_phases(kill_and_restart(), [fault(A, 5.0, 20.0)], fault(A, 5.0, 20.0),
                            boot_s=8.0)  # fmt: skip
    assert phases == {"detect_s": 15.0, "boot_s": 8.0, "member_start_s": pytest.approx(1.96),
                      "back_s": pytest.approx(24.96)}  # fmt: skip
    parts = phases["detect_s"], phases["boot_s"], phases["member_start_s"]
    assert sum(p or 0 for p in parts) == pytest.approx(phases["back_s"])


def test_ha_phases_where_the_host_booted_by_itself_end_its_boot_at_the_first_answer() -> None:
    """A VM: powered on at 20.0; its mongod first answered between the unanswered poll of 20.1
    and the STARTUP2 one of 21.0 (at 20.56); healthy at 29.96."""
    record = fault(A, 5.0, 20.0)
    phases = restart_phases(kill_and_restart(), [record], record, boot_s=None)
    assert phases == {"detect_s": 15.0, "boot_s": pytest.approx(0.56),
                      "member_start_s": pytest.approx(9.4),
                      "back_s": pytest.approx(24.96)}  # fmt: skip


def test_ha_phases_not_seen_are_none() -> None:
    never_back = kill_and_restart()[:5]  # no answer after the restart
    record = fault(A, 5.0, 20.0)
    assert restart_phases(never_back, [record], record, boot_s=None) == {
        "detect_s": 15.0, "boot_s": None, "member_start_s": None, "back_s": None}  # fmt: skip
    assert restart_phases(never_back, [record], record, boot_s=3.0)["boot_s"] == 3.0
    unreverted = fault(A, 5.0, None)
    assert set(restart_phases(kill_and_restart(), [unreverted], unreverted,
                              boot_s=3.0).values()) == {None}  # fmt: skip


def test_member_states_record_changes_with_times_in_ms() -> None:
    ops = [*kill_and_restart(), status(B, 7.00049, "PRIMARY", dur=0.0)]
    assert member_states(ops) == {
        A: [
            (4.02, "SECONDARY"),
            (5.12, "DOWN"),
            (21.02, "STARTUP2"),
            (25.02, "RECOVERING"),
            (30.02, "SECONDARY"),
        ],
        B: [(4.02, "PRIMARY")],
    }


def test_member_states_follow_t_end_and_round_to_ms() -> None:
    ops = [status(B, 2.0, "SECONDARY", dur=0.0004), status(B, 1.0, "PRIMARY", dur=0.0006)]
    assert member_states(ops) == {B: [(1.001, "PRIMARY"), (2.0, "SECONDARY")]}
    assert member_states([]) == {}


def test_recovery_is_revert_to_midpoint_of_last_unhealthy_and_first_healthy_poll() -> None:
    result = recovery_s(kill_and_restart(), [fault(A, 5.0, 20.0)])
    # Last RECOVERING poll ended 29.92, first SECONDARY poll started 30.0.
    assert result == {A: pytest.approx(9.96)}


def test_never_healthy_is_none_and_unreverted_faults_are_left_out() -> None:
    ops = kill_and_restart()[:8]
    result = recovery_s(ops, [fault(A, 5.0, 20.0), fault(B, 6.0, None, index=1)])
    assert result == {A: None}


def test_a_healthy_first_answer_after_a_prev_before_the_revert_uses_its_start() -> None:
    ops = [status(A, 19.0, None), status(A, 20.5, "SECONDARY")]
    assert recovery_s(ops, [fault(A, 5.0, 20.0)]) == {A: pytest.approx(0.5)}


def test_a_frozen_member_answering_the_poll_in_flight_at_the_revert_is_zero() -> None:
    # host-freeze: the poll sent at 19.9 hangs until SIGCONT at 20.0, then answers.
    ops = [status(A, 4.0, "PRIMARY"), status(A, 19.9, "SECONDARY", dur=0.15)]
    assert recovery_s(ops, [fault(A, 5.0, 20.0)]) == {A: 0.0}


def test_rs1_member_back_as_primary_counts_as_recovered() -> None:
    ops = [status(A, 4.0, "PRIMARY"), status(A, 31.0, None), status(A, 32.0, "PRIMARY")]
    assert recovery_s(ops, [fault(A, 5.0, 30.0)]) == {A: pytest.approx((31.02 + 32.0) / 2 - 30.0)}


def test_arbiter_is_healthy() -> None:
    ops = [status(B, 12.0, None), status(B, 12.5, "ARBITER")]
    assert recovery_s(ops, [fault(B, 5.0, 12.0)]) == {B: pytest.approx(0.26)}


def test_two_faults_on_one_member_the_later_revert_wins() -> None:
    ops = [
        status(A, 10.0, None),
        status(A, 11.0, "SECONDARY"),
        status(A, 20.0, None),
        status(A, 23.0, "ROLLBACK"),
        status(A, 24.0, "SECONDARY"),
    ]
    faults = [fault(A, 19.0, 20.0, index=1), fault(A, 5.0, 10.0, index=0)]
    assert recovery_s(ops, faults) == {A: pytest.approx((23.02 + 24.0) / 2 - 20.0)}
    # Not knowing of the second fault, the member's recovery lasts until it is stably back.
    assert recovery_s(ops, faults[1:]) == {A: pytest.approx((23.02 + 24.0) / 2 - 10.0)}


def test_a_member_healthy_at_the_revert_recovers_after_its_rollback() -> None:
    # A partitioned primary steps down (SECONDARY when the partition heals), then rolls back.
    ops = [
        status(A, 29.5, "SECONDARY"),
        status(A, 30.5, "SECONDARY"),
        status(A, 31.0, "ROLLBACK"),
        status(A, 31.5, "RECOVERING"),
        status(A, 32.0, "SECONDARY"),
        status(A, 33.0, "SECONDARY"),
    ]
    assert recovery_s(ops, [fault(A, 5.0, 30.0)]) == {A: pytest.approx((31.52 + 32.0) / 2 - 30)}


def test_polls_of_other_members_do_not_count() -> None:
    ops = [status(B, 21.0, "SECONDARY"), status(A, 25.0, None)]
    assert recovery_s(ops, [fault(A, 5.0, 20.0)]) == {A: None}


def test_too_stale_names_members_whose_status_said_so() -> None:
    def recovering(member: str, message: str) -> Op:
        detail = {"state": "RECOVERING", "term": 1, "message": message}
        return Op("recovery", "status", member, 7.0, 7.02, "ok", detail)

    stale = recovering(B, "too stale to catch up: a:27017 no longer has our last entry")
    searching = recovering(A, "could not find member to sync from")
    assert too_stale([*kill_and_restart(), stale, searching]) == [B]
    assert too_stale(kill_and_restart()) == []


def test_too_stale_reads_mongodbs_field_before_any_message() -> None:
    # MongoDB 4.2+ says so in replSetGetStatus (`tooStale: true`), whatever its infoMessage.
    flagged = Op("recovery", "status", A, 7.0, 7.02, "ok",
                 {"state": "RECOVERING", "term": 1, "too_stale": True})  # fmt: skip
    assert too_stale([flagged]) == [A]


@pytest.mark.parametrize(
    "message",
    [
        "error RS102 too stale to catch up",  # MongoDB up to 4.0, and servers that copy it
        "too stale to catch up -- entering maintenance mode",  # MongoDB 4.x
        "Too stale to catch up: b:27017 no longer has our last entry",  # the emulator
    ],
)
def test_too_stale_falls_back_to_each_versions_wording(message: str) -> None:
    op = Op("recovery", "status", B, 7.0, 7.02, "ok",
            {"state": "RECOVERING", "term": 1, "message": message})  # fmt: skip
    assert too_stale([op]) == [B]
