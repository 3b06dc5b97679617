"""A history's ops as columns, and the spill that keeps them on disk as a run goes on.

A run of hours records millions of probe attempts; as Python objects they take about 430 bytes
each. The spill writes them out a batch at a time as NumPy arrays, one per probe and batch
(`.npy`, NumPy's own format: times, codes for the op, member and outcome, the ledger's `seq`),
with the details that are more than a `seq` pickled beside them. Readers load one probe's
arrays at a time: as `OpColumns` for the analyzers that work on whole columns, as `Op`s for
the rest. NumPy is imported only when a history grows past its first batch or is analysed.
"""

from __future__ import annotations

import json
import pickle
import shutil
import tempfile
import weakref
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsdrill.op import Op

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

ROW = [("index", "<i8"), ("t_start", "<f8"), ("t_end", "<f8"), ("probe", "<u2"), ("op", "<u2"),
       ("member", "<i4"), ("outcome", "<u2"), ("seq", "<i8"), ("detail", "u1")]  # fmt: skip
"""One spilled op: its place in the history, times, codes into the spill's name tables
(member -1: none), the ledger's `seq` (-1: none) and whether its detail is pickled beside the
array (else the detail is `{"seq": seq}`, or `{}` without one)."""

CODES = {"probe": "<u2", "op": "<u2", "member": "<i4", "outcome": "<u2"}
"""The name tables and their codes' types."""


def _seq_only(detail: dict[str, Any]) -> int | None:
    """The detail's `seq` when that is all it holds (most ops), else None."""
    if len(detail) == 1:
        seq = detail.get("seq")
        if type(seq) is int and seq >= 0:  # exactly int: read back as one
            return seq
    return None


def _seq(detail: dict[str, Any]) -> int:
    seq = detail.get("seq")
    return int(seq) if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else -1


@dataclass(frozen=True)
class OpColumns:
    """Ops as arrays, in the order they ended: `probe`, `op`, `member` and `outcome` are
    codes into the name tuples (`member` -1: none), `seq` the detail's `seq` (-1: none)."""

    probe: NDArray[np.uint16]
    op: NDArray[np.uint16]
    member: NDArray[np.int32]
    outcome: NDArray[np.uint16]
    t_start: NDArray[np.float64]
    t_end: NDArray[np.float64]
    seq: NDArray[np.int64]
    probe_names: tuple[str, ...]
    op_names: tuple[str, ...]
    member_names: tuple[str, ...]
    outcome_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.t_end)

    def code(self, table: str, name: str | None) -> int:
        """`name`'s code in the table `table` ("probe", "op", "member", "outcome"); -1 when
        absent (so a comparison with it matches nothing)."""
        names: tuple[str, ...] = getattr(self, f"{table}_names")
        return names.index(name) if name in names else -1

    @property
    def ok(self) -> NDArray[np.bool_]:
        return self.outcome == self.code("outcome", "ok")

    def where(self, mask: NDArray[Any]) -> OpColumns:
        """The ops `mask` selects (a boolean mask, or indices in the order wanted)."""
        return OpColumns(self.probe[mask], self.op[mask], self.member[mask], self.outcome[mask],
                         self.t_start[mask], self.t_end[mask], self.seq[mask], self.probe_names,
                         self.op_names, self.member_names, self.outcome_names)  # fmt: skip

    def named(self, table: str, names: Collection[str]) -> NDArray[np.bool_]:
        """Which ops' `table` ("probe", "op", ...) is one of `names`."""
        import numpy as np

        codes = [self.code(table, n) for n in names]
        return np.isin(getattr(self, table), [c for c in codes if c >= 0])

    @classmethod
    def of(cls, ops: Iterable[Op]) -> OpColumns:
        """Columns of a list of ops (tests, and the ops not spilled yet)."""
        import numpy as np

        tables: dict[str, dict[str, int]] = {t: {} for t in ("probe", "op", "member", "outcome")}
        rows = [(tables["probe"].setdefault(o.probe, len(tables["probe"])),
                 tables["op"].setdefault(o.op, len(tables["op"])),
                 -1 if o.member is None else tables["member"].setdefault(o.member,
                                                                         len(tables["member"])),
                 tables["outcome"].setdefault(o.outcome, len(tables["outcome"])),
                 o.t_start, o.t_end, _seq(o.detail)) for o in ops]  # fmt: skip
        cols = list(zip(*rows, strict=True)) if rows else [()] * 7
        dtypes = (*CODES.values(), "<f8", "<f8", "<i8")
        a = [np.array(c, dtype=d) for c, d in zip(cols, dtypes, strict=True)]
        names = [tuple(tables[t]) for t in CODES]
        return cls(a[0], a[1], a[2], a[3], a[4], a[5], a[6], names[0], names[1], names[2],
                   names[3])  # fmt: skip

    @classmethod
    def concat(cls, parts: Sequence[OpColumns]) -> OpColumns:
        """`parts` one after the other, their name tables merged."""
        import numpy as np

        tables: dict[str, tuple[str, ...]] = {}
        codes: dict[str, Any] = {}
        for table, dtype in CODES.items():
            names: dict[str, int] = {}
            for part in parts:
                for name in getattr(part, f"{table}_names"):
                    names.setdefault(name, len(names))
            tables[table] = tuple(names)
            # Each part's codes through its lookup table; the last entry maps -1 (no member).
            recoded = [
                np.array([names[n] for n in getattr(part, f"{table}_names")] + [-1])[
                    getattr(part, table).astype(np.int64)
                ]
                for part in parts
            ]
            codes[table] = np.concatenate([np.array([], dtype), *recoded]).astype(dtype)
        times = {
            c: np.concatenate([np.array([], d), *(getattr(p, c) for p in parts)])
            for c, d in (("t_start", "<f8"), ("t_end", "<f8"), ("seq", "<i8"))
        }
        return cls(codes["probe"], codes["op"], codes["member"], codes["outcome"],
                   times["t_start"], times["t_end"], times["seq"], tables["probe"],
                   tables["op"], tables["member"], tables["outcome"])  # fmt: skip


@dataclass
class _Part:
    """One probe's ops of one batch, on disk."""

    array: Path
    details: Path | None
    count: int
    t_end_max: float


class Spill:
    """The spilled ops of one history: batches, each one array per probe. Not thread-safe: the
    History serialises calls. The directory is a private temporary one unless given, removed
    with the Spill."""

    def __init__(self, directory: Path | None = None) -> None:
        self._given = directory
        self._dir: Path | None = None
        self._batches: list[dict[int, _Part]] = []
        self._tables: dict[str, dict[str, int]] = {
            t: {} for t in ("probe", "op", "member", "outcome")
        }

    def _directory(self) -> Path:
        if self._dir is None:
            if self._given is not None:
                self._given.mkdir(parents=True, exist_ok=True)
                self._dir = self._given
            else:
                self._dir = Path(tempfile.mkdtemp(prefix="rsdrill-history-"))
                weakref.finalize(self, shutil.rmtree, self._dir, True)
        return self._dir

    def _code(self, table: str, name: str) -> int:
        codes = self._tables[table]
        return codes.setdefault(name, len(codes))

    def _names(self, table: str) -> list[str]:
        return list(self._tables[table])

    def write(self, ops: Sequence[Op], first_index: int) -> None:
        """Spill `ops`, the `first_index`th op of the history and those after it."""
        import numpy as np

        by_probe: dict[int, list[tuple[Any, ...]]] = {}
        details: dict[int, dict[int, dict[str, Any]]] = {}
        for i, o in enumerate(ops):
            probe = self._code("probe", o.probe)
            rows = by_probe.setdefault(probe, [])
            seq = _seq_only(o.detail)
            kept = bool(o.detail) and seq is None
            if kept:
                details.setdefault(probe, {})[len(rows)] = o.detail
            rows.append((first_index + i, o.t_start, o.t_end, probe, self._code("op", o.op),
                         -1 if o.member is None else self._code("member", o.member),
                         self._code("outcome", o.outcome),
                         _seq(o.detail) if seq is None else seq, kept))  # fmt: skip
        batch: dict[int, _Part] = {}
        directory = self._directory()
        for probe, rows in by_probe.items():
            stem = directory / f"{len(self._batches)}-{probe}"
            array = np.array(rows, dtype=ROW)
            np.save(stem.with_suffix(".npy"), array)
            pickled = None
            if probe in details:
                pickled = stem.with_suffix(".pkl")
                pickled.write_bytes(pickle.dumps(details[probe], pickle.HIGHEST_PROTOCOL))
            batch[probe] = _Part(stem.with_suffix(".npy"), pickled, len(rows),
                                 float(array["t_end"].max()))  # fmt: skip
        self._batches.append(batch)

    def counts(self) -> Counter[str]:
        names = self._names("probe")
        counts: Counter[str] = Counter()
        for batch in self._batches:
            for probe, part in batch.items():
                counts[names[probe]] += part.count
        return counts

    def batch_count(self) -> int:
        return len(self._batches)

    def _parts(self, probes: Collection[str] | None, batch: dict[int, _Part]) -> list[_Part]:
        if probes is None:
            return list(batch.values())
        codes = [self._tables["probe"].get(p) for p in probes]
        return [batch[c] for c in codes if c is not None and c in batch]

    def ops(self, probes: Collection[str] | None = None, since_s: float | None = None
            ) -> list[Op]:  # fmt: skip
        """The spilled ops of `probes` (all when None) that ended at `since_s` or later, in
        the order they ended."""
        found: list[Op] = []
        for batch in range(len(self._batches)):
            found.extend(self.batch_ops(batch, probes, since_s))
        return found

    def batch_ops(self, batch: int, probes: Collection[str] | None = None,
                  since_s: float | None = None) -> list[Op]:  # fmt: skip
        """The ops of one batch (of `probes`, ended at `since_s` or later) as `Op`s."""
        import numpy as np

        parts = [p for p in self._parts(probes, self._batches[batch])
                 if since_s is None or p.t_end_max >= since_s]  # fmt: skip
        if not parts:
            return []
        names = {t: self._names(t) for t in self._tables}
        rows: list[tuple[int, Op]] = []
        for part in parts:
            details: dict[int, dict[str, Any]] = (
                pickle.loads(part.details.read_bytes()) if part.details else {}
            )
            array = np.load(part.array)
            listed = array.tolist()
            for row, (index, t0, t1, probe, op, member, outcome, seq, kept) in enumerate(listed):
                if since_s is not None and t1 < since_s:
                    continue
                detail = details[row] if kept else ({"seq": seq} if seq >= 0 else {})
                rows.append((index, Op(names["probe"][probe], names["op"][op],
                                       None if member < 0 else names["member"][member],
                                       t0, t1, names["outcome"][outcome], detail)))  # fmt: skip
        if len(parts) > 1:
            rows.sort(key=lambda r: r[0])
        return [op for _, op in rows]

    def batch_jsonl(self, batch: int) -> str:
        """One batch's ops as `History.write_jsonl` writes them, a line each, in the order they
        ended: built from the arrays, with only the details beyond a `seq` encoded one by one
        (a day's run has millions of lines)."""
        import numpy as np

        quoted = {t: [json.dumps(n) for n in self._names(t)] for t in self._tables}
        rows: list[tuple[int, str]] = []
        for part in self._batches[batch].values():
            details: dict[int, dict[str, Any]] = (
                pickle.loads(part.details.read_bytes()) if part.details else {}
            )
            listed = np.load(part.array).tolist()
            for row, (index, t0, t1, probe, op, member, outcome, seq, kept) in enumerate(listed):
                if kept:
                    detail = json.dumps(details[row], default=str)
                else:
                    detail = f'{{"seq": {seq}}}' if seq >= 0 else "{}"
                rows.append((index, f'{{"probe": {quoted["probe"][probe]}, "op": '
                             f'{quoted["op"][op]}, "member": '
                             f'{"null" if member < 0 else quoted["member"][member]}, '
                             f'"t_start": {t0!r}, "t_end": {t1!r}, "outcome": '
                             f'{quoted["outcome"][outcome]}, "detail": {detail}}}\n'))  # fmt: skip
        rows.sort(key=lambda r: r[0])
        return "".join(line for _, line in rows)

    def columns(self, probes: Collection[str]) -> OpColumns:
        """The spilled ops of `probes` as columns, in the order they ended."""
        import numpy as np

        arrays = [np.load(part.array) for batch in self._batches
                  for part in self._parts(probes, batch)]  # fmt: skip
        array = np.concatenate(arrays) if arrays else np.array([], dtype=ROW)
        array = array[np.argsort(array["index"], kind="stable")]
        return OpColumns(
            array["probe"].copy(),
            array["op"].copy(),
            array["member"].copy(),
            array["outcome"].copy(),
            array["t_start"].copy(),
            array["t_end"].copy(),
            array["seq"].copy(),
            *(tuple(self._names(t)) for t in ("probe", "op", "member", "outcome")),
        )
