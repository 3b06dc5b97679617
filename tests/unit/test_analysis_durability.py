"""Acknowledged and lost writes from the ledger; replication lag."""

from __future__ import annotations

from rsdrill.analysis.durability import Durability, durability
from rsdrill.analysis.lag import replication_lag_max_s
from rsdrill.history import Op

A, B, C = "a:27017", "b:27017", "c:27017"


def insert(seq: int, ok: bool = True) -> Op:
    t = 1.0 + seq * 0.01
    if ok:
        return Op("ledger", "insert", A, t, t + 0.005, "ok", {"seq": seq})
    detail = {"seq": seq, "error": "not primary", "code": 10107, "type": "NotPrimaryError"}
    return Op("ledger", "insert", A, t, t + 0.005, "error", detail)


def readback(missing: list[int], ok: bool = True, t: float = 60.0) -> Op:
    if ok:
        return Op("ledger", "readback", B, t, t + 0.1, "ok", {"checked": 12, "missing": missing})
    return Op("ledger", "readback", None, t, t + 5.0, "timeout", {"error": "x", "code": None})


def test_rollback_loses_exactly_the_acknowledged_missing_seqs() -> None:
    ops = [insert(s) for s in range(10)] + [insert(10, ok=False), insert(11)]
    # 10 was never acknowledged, 99 never written: neither is a lost acknowledged write.
    ops.append(readback([8, 7, 10, 99, 7]))
    assert durability(ops) == Durability(11, 2, [7, 8])


def test_a_ledger_sharing_the_write_probe_counts_that_probes_inserts() -> None:
    def write(seq: int) -> Op:
        return Op("write", "insert", A, 1.0 + seq, 1.01 + seq, "ok", {"seq": seq})

    shared = Op(
        "ledger", "readback", B, 60.0, 60.1, "ok", {"checked": 3, "missing": [2], "of": "write"}
    )
    # The ledger probe's own inserts (here a stray one) are not the ledger any more.
    ops = [write(0), write(1), write(2), insert(5), shared]
    assert durability(ops) == Durability(3, 1, [2])


def test_nothing_missing_is_zero_lost() -> None:
    assert durability([insert(0), insert(1), readback([])]) == Durability(2, 0, [])


def test_failed_or_missing_readback_leaves_losses_unknown() -> None:
    acked = [insert(0), insert(1), insert(2, ok=False)]
    assert durability(acked) == Durability(2, None, [])
    assert durability([*acked, readback([1], ok=False)]) == Durability(2, None, [])


def test_the_last_readback_counts() -> None:
    ops = [insert(0), insert(1), readback([0], t=30.0), readback([], ok=False, t=60.0)]
    assert durability(ops) == Durability(2, None, [])


def test_no_ledger_is_all_unknown() -> None:
    write = Op("write", "insert", A, 1.0, 1.1, "ok", {"seq": 0})
    assert durability([write]) == Durability(None, None, [])


def test_all_inserts_failing_is_zero_acknowledged() -> None:
    assert durability([insert(0, ok=False), readback([0])]) == Durability(0, 0, [])


def lag(t: float, lags: dict[str, float], ok: bool = True) -> Op:
    return Op("lag", "status", A, t, t + 0.01, "ok" if ok else "error", {"lag_s": lags})


def test_lag_is_the_max_over_polls_and_secondaries() -> None:
    ops = [lag(1.0, {B: 0.0, C: 1.0}), lag(2.0, {B: 7.0, C: 2.0}), lag(3.0, {B: 0.5})]
    assert replication_lag_max_s(ops) == 7.0


def test_lag_without_polls_or_secondaries_is_none() -> None:
    assert replication_lag_max_s([]) is None
    assert replication_lag_max_s([lag(1.0, {}), lag(2.0, {B: 9.0}, ok=False)]) is None


def test_seqs_read_back_twice_are_duplicated_writes() -> None:
    ops = [insert(s) for s in range(5)]
    twice = Op("ledger", "readback", B, 60.0, 60.1, "ok",
               {"checked": 5, "missing": [], "duplicated": [1, 3]})  # fmt: skip
    assert durability([*ops, twice]) == Durability(5, 0, [], 2)
    # A read-back that did not look for them (an older history) says nothing of them.
    assert durability([*ops, readback([])]).duplicated_writes is None
