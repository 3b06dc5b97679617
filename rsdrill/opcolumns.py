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
import os
import pickle
import shutil
import stat
import tempfile
import weakref
from bisect import bisect_right
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsdrill.home import rsdrill_home
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


def spill_root() -> Path:
    """Where histories spill: `$RSDRILL_HOME/spill`, not the temporary directory, which is
    often in memory (tmpfs), what spilling is for sparing. Each spill is a directory named
    after the pid of the process whose history it holds, `-`, and mkdtemp's random part."""
    return rsdrill_home() / "spill"


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


FIELDS = {"probe": "<u2", "op": "<u2", "member": "<i4", "outcome": "<u2", "t_start": "<f8",
          "t_end": "<f8", "seq": "<i8", "index": "<i8"}  # fmt: skip
"""The columns an `OpColumns` can hold, and their types."""
ALL = tuple(FIELDS)
TIMES = ("t_start", "t_end", "outcome")
"""The columns of when attempts ran and whether they succeeded."""
SEQS = ("op", "outcome", "seq")
"""The columns of which inserts were acknowledged, by seq."""


@dataclass(frozen=True)
class OpColumns:
    """Ops as arrays, in the order they ended: `probe`, `op`, `member` and `outcome` are
    codes into the name tables (`member` -1: none), `seq` the detail's `seq` (-1: none). Only
    the fields asked for are loaded (a day's history has millions of ops); reading another
    is an error, not an empty column."""

    arrays: dict[str, NDArray[Any]]
    names: dict[str, tuple[str, ...]]
    """Per table ("probe", "op", "member", "outcome"), the name of each code."""
    length: int

    def field(self, name: str) -> NDArray[Any]:
        if name not in self.arrays:
            raise KeyError(f"the column {name!r} was not loaded")
        return self.arrays[name]

    @property
    def probe(self) -> NDArray[np.uint16]:
        return self.field("probe")

    @property
    def op(self) -> NDArray[np.uint16]:
        return self.field("op")

    @property
    def member(self) -> NDArray[np.int32]:
        return self.field("member")

    @property
    def outcome(self) -> NDArray[np.uint16]:
        return self.field("outcome")

    @property
    def t_start(self) -> NDArray[np.float64]:
        return self.field("t_start")

    @property
    def t_end(self) -> NDArray[np.float64]:
        return self.field("t_end")

    @property
    def seq(self) -> NDArray[np.int64]:
        return self.field("seq")

    @property
    def index(self) -> NDArray[np.int64]:
        """Each op's place in the history (`ops_at` takes it back to the op)."""
        return self.field("index")

    def __len__(self) -> int:
        return self.length

    def code(self, table: str, name: str | None) -> int:
        """`name`'s code in the table `table` ("probe", "op", "member", "outcome"); -1 when
        absent (so a comparison with it matches nothing)."""
        names = self.names[table]
        return names.index(name) if name in names else -1

    @property
    def ok(self) -> NDArray[np.bool_]:
        return self.outcome == self.code("outcome", "ok")

    def where(self, mask: NDArray[Any]) -> OpColumns:
        """The ops `mask` selects (a boolean mask, or indices in the order wanted)."""
        arrays = {name: array[mask] for name, array in self.arrays.items()}
        length = int(mask.sum()) if mask.dtype == bool else len(mask)
        return OpColumns(arrays, self.names, length)

    @classmethod
    def joined(cls, parts: Sequence[OpColumns]) -> OpColumns:
        """`parts` of the same name tables, one after the other."""
        import numpy as np

        if len(parts) == 1:
            return parts[0]
        arrays = {f: np.concatenate([p.arrays[f] for p in parts]) for f in parts[0].arrays}
        return cls(arrays, parts[0].names, sum(len(p) for p in parts))

    def named(self, table: str, names: Collection[str]) -> NDArray[np.bool_]:
        """Which ops' `table` ("probe", "op", ...) is one of `names`."""
        import numpy as np

        codes = [self.code(table, n) for n in names]
        return np.isin(self.field(table), [c for c in codes if c >= 0])

    @classmethod
    def of(cls, ops: Sequence[Op], tables: dict[str, dict[str, int]] | None = None,
           indices: Sequence[int] | None = None) -> OpColumns:  # fmt: skip
        """Every column of a list of ops (tests, and the ops not spilled yet); codes from
        `tables` (extended with new names), else tables of their own; `index` from `indices`,
        else each op's place in `ops`."""
        import numpy as np

        tables = tables if tables is not None else {t: {} for t in CODES}

        def code(table: str, name: str) -> int:
            return tables[table].setdefault(name, len(tables[table]))

        places = range(len(ops)) if indices is None else indices
        rows = [(code("probe", o.probe), code("op", o.op),
                 -1 if o.member is None else code("member", o.member), code("outcome", o.outcome),
                 o.t_start, o.t_end, _seq(o.detail), i)
                for i, o in zip(places, ops, strict=True)]  # fmt: skip
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(FIELDS)
        arrays = {f: np.array(c, dtype=d) for (f, d), c in zip(FIELDS.items(), cols, strict=True)}
        return cls(arrays, {t: tuple(tables[t]) for t in CODES}, len(ops))


@dataclass
class _Part:
    """One probe's ops of one batch, on disk."""

    array: Path
    details: Path | None
    count: int
    t_end_max: float
    t_end_min: float

    def rows(self) -> tuple[list[tuple[Any, ...]], dict[int, dict[str, Any]]]:
        """This part's rows (as `ROW`, listed) and the details pickled beside them, by row."""
        import numpy as np

        details = pickle.loads(self.details.read_bytes()) if self.details else {}
        return np.load(self.array).tolist(), details

    def overlaps(self, ended: tuple[float, float]) -> bool:
        """Whether this part may hold an op that ended in `ended` (from, to: to excluded)."""
        return self.t_end_max >= ended[0] and self.t_end_min < ended[1]

    def columns(self, fields: Collection[str], names: dict[str, tuple[str, ...]],
                ended: tuple[float, float] | None) -> OpColumns:  # fmt: skip
        """This part's ops as the columns `fields` (those whose `t_end` is in `ended`)."""
        import numpy as np

        rows = np.load(self.array, mmap_mode="r")
        arrays = {f: np.array(rows[f]) for f in fields}
        length = self.count
        if ended:
            t_end = np.array(rows["t_end"])
            keep = (t_end >= ended[0]) & (t_end < ended[1])
            arrays = {f: a[keep] for f, a in arrays.items()}
            length = int(keep.sum())
        del rows
        return OpColumns(arrays, names, length)


@dataclass
class Pending:
    """A batch encoded, not yet stored or committed."""

    stem: Path
    first_index: int
    rows: dict[int, list[tuple[Any, ...]]]
    details: dict[int, dict[int, dict[str, Any]]]
    parts: dict[int, _Part] = field(default_factory=dict)

    def store(self) -> Pending:
        """Write the batch's files (no spill state is touched: any thread, any lock)."""
        import numpy as np

        for probe, rows in self.rows.items():
            stem = self.stem.with_name(f"{self.stem.name}-{probe}")
            array = np.array(rows, dtype=ROW)
            np.save(stem.with_suffix(".npy"), array)
            pickled = None
            if probe in self.details:
                pickled = stem.with_suffix(".pkl")
                pickled.write_bytes(pickle.dumps(self.details[probe], pickle.HIGHEST_PROTOCOL))
            ends = array["t_end"]
            self.parts[probe] = _Part(stem.with_suffix(".npy"), pickled, len(rows),
                                      float(ends.max()), float(ends.min()))  # fmt: skip
        self.rows, self.details = {}, {}
        return self


class Spill:
    """The spilled ops of one history: batches, each one array per probe. Not thread-safe: the
    History serialises calls. The directory is a private one (mode 0700), made at the
    first batch (under `spill_root`) and removed with the Spill; a process killed before that
    leaves it, for `rsdrill recover` to find (`spills_left`)."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._batches: list[dict[int, _Part]] = []
        self._firsts: list[int] = []  # each batch's first op's place in the history
        self._encoded = 0  # batches encoded and not committed yet
        self._tables: dict[str, dict[str, int]] = {t: {} for t in CODES}

    def _directory(self) -> Path:
        if self._dir is None:
            root = spill_root()
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
            weakref.finalize(self, shutil.rmtree, self._dir, True)
        return self._dir

    def _code(self, table: str, name: str) -> int:
        codes = self._tables[table]
        return codes.setdefault(name, len(codes))

    def _names(self, table: str) -> list[str]:
        return list(self._tables[table])

    def encode(self, ops: Sequence[Op], first_index: int) -> Pending:
        """`ops` (the `first_index`th op of the history and those after it) as rows of this
        spill's codes, to be stored (by any thread) and then committed."""
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
        stem = self._directory() / str(len(self._batches) + self._encoded)
        self._encoded += 1
        return Pending(stem, first_index, by_probe, details)

    def abandon(self, pending: Pending) -> None:
        """Forget an encoded batch that could not be stored."""
        self._encoded -= 1
        for part in pending.parts.values():
            part.array.unlink(missing_ok=True)

    def commit(self, pending: Pending) -> None:
        """Make a stored batch part of the spill (batches are committed in the order they
        were encoded)."""
        self._encoded -= 1
        self._batches.append(pending.parts)
        self._firsts.append(pending.first_index)

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
        return [op for _, op in self._batch_rows(batch, probes, since_s)]

    def ops_at(self, indices: Collection[int], probes: Collection[str] | None = None
               ) -> dict[int, Op]:  # fmt: skip
        """The spilled ops (of `probes`) at these places in the history."""
        wanted = set(indices)
        batches = {bisect_right(self._firsts, i) - 1 for i in wanted}
        return {index: op for batch in sorted(b for b in batches if b >= 0)
                for index, op in self._batch_rows(batch, probes) if index in wanted}  # fmt: skip

    def _batch_rows(self, batch: int, probes: Collection[str] | None = None,
                    since_s: float | None = None) -> list[tuple[int, Op]]:  # fmt: skip
        parts = [p for p in self._parts(probes, self._batches[batch])
                 if since_s is None or p.t_end_max >= since_s]  # fmt: skip
        names = {t: self._names(t) for t in self._tables}
        rows: list[tuple[int, Op]] = []
        for part in parts:
            listed, details = part.rows()
            for row, (index, t0, t1, probe, op, member, outcome, seq, kept) in enumerate(listed):
                if since_s is not None and t1 < since_s:
                    continue
                detail = details[row] if kept else ({"seq": seq} if seq >= 0 else {})
                rows.append((index, Op(names["probe"][probe], names["op"][op],
                                       None if member < 0 else names["member"][member],
                                       t0, t1, names["outcome"][outcome], detail)))  # fmt: skip
        if len(parts) > 1:
            rows.sort(key=lambda r: r[0])
        return rows

    def batch_jsonl(self, batch: int) -> str:
        """One batch's ops as `History.write_jsonl` writes them, a line each, in the order they
        ended: built from the arrays, with only the details beyond a `seq` encoded one by one
        (a day's run has millions of lines)."""

        quoted = {t: [json.dumps(n) for n in self._names(t)] for t in self._tables}
        rows: list[tuple[int, str]] = []
        for part in self._batches[batch].values():
            listed, details = part.rows()
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

    def part_list(self, probes: Collection[str], ended: tuple[float, float] | None
                  ) -> tuple[list[list[_Part]], dict[str, tuple[str, ...]]]:  # fmt: skip
        """Per batch, the spilled parts of `probes` that may hold ops whose `t_end` is in
        `ended`; and the name tables as they are now (to read the parts with, without the
        spill)."""
        batches = [[p for p in self._parts(probes, batch) if ended is None or p.overlaps(ended)]
                   for batch in self._batches]  # fmt: skip
        return [b for b in batches if b], {t: tuple(self._tables[t]) for t in CODES}

    def columns(self, probes: Collection[str], fields: Collection[str], tail: Sequence[Op],
                tail_indices: Sequence[int], *, ordered: bool = True) -> OpColumns:  # fmt: skip
        """The spilled ops of `probes`, then those of `tail` (ops not spilled yet, of those
        probes), as the columns `fields`, in the order they ended (`ordered`; else probe by
        probe). Each field is copied from the arrays on disk into one array; the rest of a row
        is never held."""
        import numpy as np

        parts = [part for batch in self._batches for part in self._parts(probes, batch)]
        listed = OpColumns.of(tail, self._tables, tail_indices)  # the spill's own codes
        size = sum(p.count for p in parts) + len(tail)
        several = len(probes) > 1 and ordered
        loaded = {*fields, "index"} if several else set(fields)
        arrays = {f: np.empty(size, dtype=FIELDS[f]) for f in loaded}
        at = 0
        for part in parts:
            rows = np.load(part.array, mmap_mode="r")
            for f, array in arrays.items():
                array[at : at + part.count] = rows[f]
            del rows
            at += part.count
        for f, array in arrays.items():
            array[at:] = listed.field(f)
        if several:
            order = np.argsort(arrays["index"] if "index" in fields else arrays.pop("index"),
                               kind="stable")  # fmt: skip
            for f in arrays:
                arrays[f] = arrays[f][order]
        return OpColumns(arrays, {t: tuple(self._tables[t]) for t in CODES}, size)


def spills_left() -> list[tuple[Path, int]]:
    """The spill directories this user's processes made, each with the pid of the process
    that made it, dead or alive."""
    found = []
    root = spill_root()
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        pid, dash, _ = path.name.partition("-")
        try:
            info = path.lstat()
        except OSError:
            continue
        if (dash and pid.isdigit() and stat.S_ISDIR(info.st_mode)
                and info.st_uid == os.getuid()):  # fmt: skip
            found.append((path, int(pid)))
    return found
