"""The list-append checker (rsdrill/analysis/elle.py) against Elle's own published cases.

The histories and the answers below are facts from Jepsen's Elle (test/elle/list_append_test.clj
in github.com/jepsen-io/elle, its checker tests), transcribed: each must be classified as Elle
classifies it, with the same cycle, in the same order, through the same steps. Elle writes a
transaction as a string: `ax1` appends 1 to x, `rx12` reads x = [1, 2], `ry` reads y = [].
Then two patterns from Jepsen's MongoDB 4.2.6 analysis (read skew, cyclic information flow) as
histories, and properties: a serial history has no anomaly whatever its shape."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsdrill.analysis.elle import Append, Read, Step, Txn, check
from rsdrill.analysis.invariants import transaction_violations
from rsdrill.analysis.metrics import compute_metrics
from rsdrill.experiment.probes import TransactionsProbe
from rsdrill.history import Op


def txn(ident: int, text: str, status: str = "ok") -> Txn:
    """Elle's notation: a sequence of `a<key><digit>` and `r<key><digits>`."""
    mops: list[Append | Read] = []
    for f, key, digits in re.findall(r"([ar])([a-z])(\d*)", text):
        if f == "a":
            mops.append(Append(key, int(digits)))
        else:
            mops.append(Read(key, tuple(int(d) for d in digits)))
    return Txn(ident, tuple(mops), status)  # type: ignore[arg-type]


def history(*texts: str) -> list[Txn]:
    return [txn(i + 1, t) for i, t in enumerate(texts)]


def test_g0_a_pure_write_cycle() -> None:
    # x's appends went t1, t2; y's t2, t1.
    report = check(history("ax1ay1", "ax2ay2", "rx12ry21"))
    assert report.anomaly_types == ["G0"]
    [cycle] = report.cycles
    assert cycle.txns == (1, 2, 1)
    assert cycle.steps == (Step("ww", "x", 1, 2), Step("ww", "y", 2, 1))


def test_g1a_a_read_of_an_aborted_append() -> None:
    report = check([Txn(1, (Append("x", 1),), "fail"), txn(2, "rx1")])
    assert report.anomaly_types == ["G1a"]
    assert report.aborted_reads == [{"txn": 2, "writer": 1, "key": "x", "element": 1}]


def test_g1b_an_intermediate_read_which_is_also_g_single() -> None:
    report = check(history("ax1ax2", "rx1"))
    assert report.intermediate_reads == [{"txn": 2, "writer": 1, "key": "x", "element": 1}]
    # rx1 observes ax1 but not ax2 of the same transaction.
    [cycle] = report.cycles
    assert cycle.type == "G-single" and cycle.txns == (2, 1, 2)
    assert cycle.steps == (Step("rw", "x", 1, 2), Step("wr", "x", 1))
    assert report.anomaly_types == ["G-single", "G1b"]


def test_g1c_circular_information_flow() -> None:
    # T2 appends to x after T1, but T1 saw T2's append to y.
    report = check(history("ax1ry1", "ax2ay1", "rx12ry1"))
    assert report.anomaly_types == ["G1c"]
    [cycle] = report.cycles
    assert cycle.txns == (2, 1, 2)
    assert cycle.steps == (Step("wr", "y", 1), Step("ww", "x", 1, 2))


def test_g_single_read_skew() -> None:
    # T2 appends to x after T1, but did not see T1's append to y.
    report = check(history("ax1ay1", "ax2ry", "rx12"))
    assert report.anomaly_types == ["G-single"]
    [cycle] = report.cycles
    assert cycle.txns == (2, 1, 2)
    assert cycle.steps == (Step("rw", "y", None, 1), Step("ww", "x", 1, 2))


def test_g2_item_a_pure_anti_dependency_cycle() -> None:
    report = check(history("ax1ry", "ay1rx"))
    assert report.anomaly_types == ["G2-item"]
    [cycle] = report.cycles
    assert cycle.txns == (1, 2, 1)
    assert cycle.steps == (Step("rw", "y", None, 1), Step("rw", "x", None, 1))


def test_snapshot_isolation_allows_write_skew_and_nothing_else() -> None:
    """MongoDB's transactions promise snapshot isolation: G2-item is allowed there, every other
    cycle is not."""
    assert check(history("ax1ry", "ay1rx"), "snapshot-isolation").valid
    report = check(history("ax1ay1", "ax2ry", "rx12"), "snapshot-isolation")
    assert report.anomaly_types == ["G-single"]


def test_contradictory_read_orders_and_the_cycle_the_longest_one_shows() -> None:
    report = check(history("ax1ry1", "ax2", "ax3ay1", "rx13", "rx123"))
    assert report.anomaly_types == ["G1c", "incompatible-order"]
    assert report.incompatible_orders == [{"key": "x", "values": [[1, 3], [1, 2, 3]]}]
    [cycle] = report.cycles
    assert cycle.txns == (3, 1, 2, 3)
    assert cycle.steps == (Step("wr", "y", 1), Step("ww", "x", 1, 2), Step("ww", "x", 2, 3))


def test_jepsen_mongodb_4_2_6_read_skew() -> None:
    # A transaction sees one of another's two appends and not the other: T2 reads y after
    # T1's append but x before it.
    report = check(history("ax1ay1", "rxry1"))
    assert report.anomaly_types == ["G-single"]
    assert report.cycles[0].steps[0] == Step("rw", "x", None, 1)


def test_jepsen_mongodb_4_2_6_cyclic_information_flow() -> None:
    # Each of two transactions reads the other's append: each happened before the other.
    report = check(history("ax1ry2", "ay2rx1"))
    assert report.anomaly_types == ["G1c"]
    assert report.cycles[0].txns in ((1, 2, 1), (2, 1, 2))


def test_a_transaction_that_does_not_see_its_own_append_is_internal() -> None:
    report = check(history("ax1rx", "rx1"))
    assert report.internal == [{"txn": 1, "key": "x", "read": [], "expected_suffix": [1]}]


def test_duplicate_elements() -> None:
    report = check(history("ax1", "rx11"))
    assert report.duplicate_elements == [{"txn": 2, "key": "x", "duplicates": [1]}]


def test_an_indeterminate_transaction_may_have_taken_effect() -> None:
    # An info append that a read saw is a writer like any other; no G1a.
    report = check([Txn(1, (Append("x", 1),), "info"), txn(2, "rx1")])
    assert report.valid


def _serial_history(seed: int, n: int, keys: int) -> list[Txn]:
    """Transactions run one at a time against a dict of lists: serializable by construction."""
    rng = random.Random(seed)
    state: dict[str, list[int]] = {}
    counter = 0
    txns = []
    for i in range(n):
        mops: list[Append | Read] = []
        for _ in range(rng.randint(1, 4)):
            key = f"k{rng.randrange(keys)}"
            if rng.random() < 0.5:
                counter += 1
                state.setdefault(key, []).append(counter)
                mops.append(Append(key, counter))
            else:
                mops.append(Read(key, tuple(state.get(key, []))))
        txns.append(Txn(i, tuple(mops)))
    rng.shuffle(txns)  # the order of the history does not matter, only what was read
    return txns


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 60), st.integers(1, 5))
def test_property_a_serial_history_has_no_anomaly(seed: int, n: int, keys: int) -> None:
    report = check(_serial_history(seed, n, keys))
    assert report.valid, report


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 40), st.integers(1, 4))
def test_property_read_skew_planted_in_any_serial_history_is_g_single(
    seed: int, n: int, keys: int
) -> None:
    """After any serial history, one transaction appends to x and y; another then sees its
    append to x but not the one to y: read skew, whatever came before."""
    txns = _serial_history(seed, n, keys)
    writer = Txn(n, (Append("x", -1), Append("y", -2)))
    reader = Txn(n + 1, (Read("x", (-1,)), Read("y", ())))
    report = check([*txns, writer, reader])
    assert [c.type for c in report.cycles] == ["G-single"], report
    assert report.cycles[0].txns == (n + 1, n, n + 1)


def _op(i: int, status: str, mops: list[list[object]]) -> Op:
    return Op("txn", "txn", "h:1", float(i), float(i) + 0.01, "ok" if status == "ok" else "error",
              {"status": status, "client": i % 2, "mops": mops})  # fmt: skip


def test_the_transactions_probe_s_history_gives_its_metrics_and_soak_violations() -> None:
    # Read skew, as the probe records it: T0 appends to keys 1 and 2; T1 sees only the first.
    ops = [_op(0, "ok", [["append", 1, 10], ["append", 2, 20]]),
           _op(1, "ok", [["r", 1, [10]], ["r", 2, []]]),
           _op(2, "fail", [["append", 1, 30], ["r", 2, None]])]  # fmt: skip
    m = compute_metrics(ops, [], duration_s=1.0)
    assert m.transactions_checked == 3
    assert m.transaction_anomalies == 1 and m.transaction_anomaly_types == ["G-single"]
    assert m.transaction_cycles == ["G-single: T1 -rw 2-> T0 -wr 1-> T1"]
    [violation] = transaction_violations(ops)
    assert violation.invariant == "G-single"
    assert violation.detail == "T1 -rw 2-> T0 -wr 1-> T1"  # the type is the invariant's name
    # Without the probe: nothing measured, nothing claimed.
    assert compute_metrics([], [], duration_s=1.0).transaction_anomalies is None


@pytest.mark.parametrize(("given", "expected"), [("1-4", (1, 4)), (3, (3, 3)), ("2 - 6", (2, 6))])
def test_txn_len_is_written_as_a_range_or_one_number(
    given: object, expected: tuple[int, int]
) -> None:
    assert TransactionsProbe.model_validate({"txn_len": given}).txn_len == expected


@pytest.mark.parametrize("given", ["4-1", "0-2", "x", "1-99"])
def test_a_txn_len_that_is_no_range_is_refused(given: object) -> None:
    with pytest.raises(ValueError, match=r"txn_len|tuple"):
        TransactionsProbe.model_validate({"txn_len": given})
