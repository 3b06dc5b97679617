"""history.jsonl read back for re-analysis is the history that was written."""

from __future__ import annotations

from pathlib import Path

from rsdrill.history import History, Op


def test_a_written_history_reads_back_equal(tmp_path: Path) -> None:
    ops = [
        Op("load", "read", "a:1", 0.5, 0.52, "ok", {"key": 7}),
        Op("failover", "hello", "b:2", 0.6, 0.61, "ok", {"writable": True, "primary": "b:2"}),
        Op("load", "update", None, 0.7, 5.7, "timeout", {"error": "timed out", "code": None}),
    ]
    History.from_ops(ops).write_jsonl(tmp_path / "history.jsonl")
    assert History.read_jsonl(tmp_path / "history.jsonl").ops() == ops
