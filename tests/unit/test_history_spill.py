"""A History that spilled to disk answers as the list of its ops would: every read of it, and
the run's analysis of it."""

from __future__ import annotations

import datetime as dt
import gc
import random
import threading
from pathlib import Path

import pytest

from rsdrill import history as history_module
from rsdrill.analysis.metrics import compute_metrics
from rsdrill.history import (
    FaultRecord,
    History,
    Op,
    batches,
    columns,
    flags,
    last_end,
    of_probes,
    op_jsonl,
    ops_at,
    probe_counts,
)
from rsdrill.opcolumns import Pending

PROBES = ("write", "read", "failover", "ledger", "lag")


def _ops(n: int, seed: int) -> list[Op]:
    rng = random.Random(seed)
    details = [
        lambda i: {},
        lambda i: {"seq": i},
        lambda i: {"seq": i, "error": "not primary", "code": 10107},
        lambda i: {"writable": rng.random() < 0.5, "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)},
        lambda i: {"seq": True},  # not a seq: kept as it is
        lambda i: {"lag_s": {"a:1": rng.random()}},
    ]
    ops, t = [], 0.0
    for i in range(n):
        t += rng.random() * 0.02
        ops.append(Op(rng.choice(PROBES), rng.choice(("insert", "find", "hello")),
                      rng.choice((None, "a:1", "b:2")), t, t + rng.random() * 0.05,
                      rng.choice(("ok", "ok", "error", "timeout")),
                      rng.choice(details)(i)))  # fmt: skip
    return ops


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_module, "FLUSH_OPS", 7)
    monkeypatch.setattr(history_module, "WINDOW", 20)


@pytest.mark.parametrize("seed", range(5))
def test_a_spilled_history_reads_back_as_its_ops(seed: int, small_batches: None) -> None:
    ops = _ops(200 + seed, seed)
    history = History.from_ops(ops)
    assert history._spill.batch_count() > 20  # most of it is on disk
    assert history.ops() == ops and list(history) == ops and len(history) == len(ops)
    assert history[3] == ops[3] and history[-2:] == ops[-2:]
    since_s = ops[len(ops) // 2].t_end
    for probe in PROBES:
        assert history.ops(probe) == [o for o in ops if o.probe == probe]
        assert history.ops(probe, since_s) == [
            o for o in ops if o.probe == probe and o.t_end >= since_s
        ]
    assert of_probes(history, "write", "lag") == of_probes(ops, "write", "lag")
    assert probe_counts(history) == probe_counts(ops)
    assert last_end(history) == last_end(ops)
    spilled, listed = columns(history, "write", "ledger"), columns(ops, "write", "ledger")
    for field in ("t_start", "t_end", "seq", "index"):
        assert getattr(spilled, field).tolist() == getattr(listed, field).tolist()
    for table in ("op", "member", "outcome", "probe"):
        names = [c.names[table] for c in (spilled, listed)]
        assert [names[0][k] if k >= 0 else None for k in getattr(spilled, table).tolist()] == [
            names[1][k] if k >= 0 else None for k in getattr(listed, table).tolist()
        ]
    assert spilled.ok.tolist() == [o.ok for o in ops if o.probe in ("write", "ledger")]
    # Back from a column's place to the op, and tests of each op's detail in column order.
    places = spilled.index.tolist()[::7]
    assert ops_at(history, places) == ops_at(ops, places) == [ops[i] for i in places]
    seqs = columns(history, "ledger", fields=("t_end",))
    (has_seq,) = flags(history, "ledger", lambda op: "seq" in op.detail)
    assert len(has_seq) == len(seqs) and has_seq.tolist() == [
        "seq" in o.detail for o in ops if o.probe == "ledger"
    ]
    assert [op for batch in batches(history, "lag") for op in batch] == of_probes(ops, "lag")
    with pytest.raises(KeyError, match="seq"):
        _ = seqs.seq  # not loaded: an error, never an empty column


def test_the_window_holds_the_newest_ops_for_live_views(small_batches: None) -> None:
    ops = _ops(100, 9)
    history = History()
    for op in ops[:50]:
        history.append(op)
    assert history.since(45) == ops[45:50]
    assert history.since(0) == ops[30:50]  # fell behind: the newest WINDOW only
    for op in ops[50:]:
        history.append(op)
    assert history.since(100) == [] and history.since(90) == ops[90:]


def test_the_spill_is_removed_with_its_history(small_batches: None) -> None:
    history = History.from_ops(_ops(50, 1))
    directory = history._spill._dir
    assert directory is not None and any(directory.iterdir())
    del history
    gc.collect()
    assert not directory.exists()


def test_a_run_analysed_from_its_spill_has_the_metrics_of_its_ops(
    small_batches: None, tmp_path: Path
) -> None:
    """Every analyzer reads the probes it needs from the spill: the metrics of a history held
    as a list and of the same history spilled are equal."""
    ops = _ops(3000, 4)
    faults = [FaultRecord(0, "host-kill", "a:1", injected_at_s=10.0, verified_at_s=10.1,
                          reverted_at_s=20.0, applied_at_s=10.05)]  # fmt: skip
    listed = compute_metrics(ops, faults, duration_s=40.0, sets={"rs0": ["a:1", "b:2"]})
    spilled = compute_metrics(History.from_ops(ops), faults, duration_s=40.0,
                              sets={"rs0": ["a:1", "b:2"]})  # fmt: skip
    assert spilled == listed
    assert listed.write_unavailable_s is not None and listed.latency_ms.p99 is not None


def test_a_spilled_history_writes_the_lines_of_its_ops(small_batches: None, tmp_path: Path) -> None:
    """history.jsonl built from the spill's arrays is, byte for byte, each op's own line."""
    leaky = Op("write", "insert", "a:1", 1.0, 2.0, "error",
               {"error": "auth failed for mongodb://u:hunter2@h/"})  # fmt: skip
    ops = [*_ops(150, 7), leaky, *_ops(150, 8)]
    History.from_ops(ops).write_jsonl(tmp_path / "history.jsonl")
    written = (tmp_path / "history.jsonl").read_text()
    assert written == "".join(op_jsonl(op) for op in ops).replace("hunter2", "***")
    assert "hunter2" not in written


def test_probes_append_while_a_batch_is_written_and_readers_see_each_op_once(
    small_batches: None,
) -> None:
    history = History()
    seen: list[int] = []
    done = threading.Event()

    def probe(name: str) -> None:
        for i in range(400):
            history.append(Op(name, "insert", None, i, i + 0.5, "ok", {"seq": i}))

    def reader() -> None:
        while not done.is_set():
            ops = history.ops("p0")
            assert [op.detail["seq"] for op in ops] == list(range(len(ops)))
            seen.append(len(ops))

    threads = [threading.Thread(target=probe, args=(f"p{k}",)) for k in range(4)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    # Batches many enough that appends met stores (while one is stored, appends do not start
    # another: how many there are is the machine's timing, 56-228 of 7 ops seen).
    assert len(history) == 1600 and history._spill.batch_count() > 20
    for k in range(4):
        assert [op.detail["seq"] for op in history.ops(f"p{k}")] == list(range(400))
    assert seen == sorted(seen)  # never an op read, then gone


def test_a_disk_that_fails_keeps_the_history_in_memory(
    small_batches: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(self: Pending) -> Pending:
        raise OSError(28, "No space left on device")

    ops = _ops(40, 3)
    history = History.from_ops(ops[:10])
    monkeypatch.setattr(Pending, "store", full)
    for op in ops[10:]:
        history.append(op)
    assert history.ops() == ops and history._spill.batch_count() == 1
