"""The history: every probe attempt, as it happened, and the faults' timeline.

Probes only append here; analyzers only read. Times are seconds since the run started, on the
monotonic clock (`RunClock`), so they compare across threads and with the sandbox's ground truth.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, overload

from rsdrill.op import Op
from rsdrill.opcolumns import ALL, OpColumns, Spill
from rsdrill.redact import redact_uri

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

WINDOW = 16384
"""Ops a History holds in memory for `since` (about two minutes of the main job's probes)."""
FLUSH_OPS = 4096
"""A History writes its buffered ops to the spill every this many."""


@dataclass(frozen=True)
class RunClock:
    """The run's origin on both clocks; converts either to seconds since the start."""

    mono0: float
    wall0: float

    @classmethod
    def start(cls) -> RunClock:
        return cls(time.monotonic(), time.time())

    def now(self) -> float:
        return time.monotonic() - self.mono0

    def from_mono(self, mono: float) -> float:
        return mono - self.mono0

    def from_wall(self, wall: float) -> float:
        return wall - self.wall0


CHECK_PREFIX = "check:"
"""The samples of the user's check `<name>` (`probes.checks`) are ops of probe `check:<name>`."""
STALL_PROBE = "stall"
"""The probe of rsdrill's own process: its ops are the process's stalls, not requests sent."""
LATE_START_OP = "late-start"
"""A `STALL_PROBE` op recorded by an availability probe whose attempt began late: `t_start`
its due time, `t_end` when it began, detail `{"probe": name}` (probes/base.py)."""
TXN_PROBE = "txn"
"""The transactions probe (probes/transactions.py), whose history analysis/elle.py checks."""
LEDGER_PROBE = "ledger"
"""The durability ledger's read-back (probes/durability.py): which acknowledged seqs are gone."""
CAUSAL_PROBE = "causal"
"""The causal sessions probe (probes/causal.py), whose history analysis/causal.py checks."""
SHARD_WRITE_PREFIX = "shard-write:"


def shard_write_probe(shard: str) -> str:
    """The name of a sharded target's write probe of one shard (its ops' `probe`)."""
    return f"{SHARD_WRITE_PREFIX}{shard}"


@dataclass
class FaultRecord:
    """One fault as it was carried out."""

    index: int
    kind: str
    target: str
    injected_at_s: float | None = None
    verified_at_s: float | None = None
    reverted_at_s: float | None = None
    approximation: str | None = None
    """How the platform approximated the fault (its way in the kinds' spec), if it did."""
    detail: dict[str, Any] = field(default_factory=dict)
    applied_at_s: float | None = None
    """When the injection returned: the fault in force, its duration counted from here."""
    due_at_s: float | None = None
    """When the timeline had it go in (slid by any wait for a role or a game-day answer);
    `injected_at_s` is later by this process's own delay."""
    revert_due_at_s: float | None = None
    """When the timeline had it reverted (None: the run's end, an abort or a game-day `r` did)."""


class History(Sequence[Op]):
    """Append-only, thread-safe record of probe attempts that spills to disk as it grows.

    The newest ops are held in memory (`WINDOW` of them, for live views and abort conditions);
    every `FLUSH_OPS` appended ops go to a spill directory as one NumPy array per probe (their
    details pickled beside it), so a run of hours holds megabytes, not gigabytes. A History is a
    `Sequence[Op]` in the order attempts ended; `ops(probe)` and `columns(probe)` read one
    probe's ops without touching the others'.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window: deque[Op] = deque(maxlen=WINDOW)
        self._buffer: list[Op] = []
        self._count = 0
        self._spill = Spill()
        self._flushing = False  # a batch is being written (or the disk failed: no more)
        self.last_end = 0.0
        """The latest `t_end` of any op (0.0 without ops)."""

    def append(self, op: Op) -> None:
        with self._lock:
            self._window.append(op)
            self._buffer.append(op)
            self._count += 1
            self.last_end = max(self.last_end, op.t_end)
            if len(self._buffer) < FLUSH_OPS or self._flushing:
                return
            # Encoded here, written to disk outside the lock (the other probes append on), then
            # committed: until then readers find these ops in the buffer.
            self._flushing = True
            pending = self._spill.encode(self._buffer[:FLUSH_OPS], self._count - len(self._buffer))
        try:
            pending.store()
        except OSError:
            # A full or failing disk: the history stays in memory, as it was before spilling.
            with self._lock:
                self._spill.abandon(pending)
            return
        with self._lock:
            self._spill.commit(pending)
            del self._buffer[:FLUSH_OPS]
            self._flushing = False

    def ops(self, probe: str | None = None, since_s: float | None = None) -> list[Op]:
        """A snapshot, in the order attempts ended; optionally one probe's only, and only those
        that ended at `since_s` or later."""
        with self._lock:
            spilled = self._spill.ops(None if probe is None else [probe], since_s)
            buffered = list(self._buffer)
        return spilled + [
            o for o in buffered
            if (probe is None or o.probe == probe) and (since_s is None or o.t_end >= since_s)
        ]  # fmt: skip

    def of_probes(self, probes: Collection[str]) -> list[Op]:
        """The ops of `probes`, in the order they ended."""
        if len(probes) == 1:
            return self.ops(next(iter(probes)))
        with self._lock:
            spilled = self._spill.ops(probes)
            buffered = [o for o in self._buffer if o.probe in probes]
        return spilled + buffered

    def probes(self) -> Counter[str]:
        """How many ops each probe recorded."""
        with self._lock:
            counts = self._spill.counts()
            counts.update(o.probe for o in self._buffer)
        return counts

    def columns(self, probes: Collection[str], fields: Collection[str] = ALL, *,
                ordered: bool = True) -> OpColumns:  # fmt: skip
        """The ops of `probes` as arrays, only the columns `fields` (see `OpColumns`), in the
        order they ended (`ordered`; else in any order, which spares a sort)."""
        with self._lock:
            first = self._count - len(self._buffer)
            rows = [(first + i, o) for i, o in enumerate(self._buffer) if o.probe in probes]
            return self._spill.columns(probes, fields, [o for _, o in rows],
                                       [i for i, _ in rows], ordered=ordered)  # fmt: skip

    def column_parts(
        self,
        probes: Collection[str],
        fields: Collection[str],
        ended: tuple[float, float] | None = None,
    ) -> Iterator[OpColumns]:
        """`columns` a spilled batch at a time, then the ops not spilled yet, in no particular
        order (within a batch, probe by probe): one pass over a history of any length. Only
        the ops whose `t_end` lies in `ended` (from, to: to excluded), if given."""
        with self._lock:
            batches, names = self._spill.part_list(probes, ended)
            tail = [o for o in self._buffer if o.probe in probes
                    and (ended is None or ended[0] <= o.t_end < ended[1])]  # fmt: skip
        for parts in batches:  # a batch's probes together: they ended in the same stretch
            yield OpColumns.joined([part.columns(fields, names, ended) for part in parts])
        if tail:
            yield OpColumns.of(tail)

    def ops_at(self, indices: Collection[int]) -> list[Op]:
        """The ops at these places in the history (`OpColumns.index`), in that order."""
        with self._lock:
            first = self._count - len(self._buffer)
            found = self._spill.ops_at([i for i in indices if i < first])
            found.update({i: self._buffer[i - first] for i in indices if i >= first})
        return [found[i] for i in indices]

    def batches(self, probes: Collection[str] | None) -> Iterator[list[Op]]:
        """The ops of `probes` (all: None) a spilled batch at a time (then those not spilled
        yet), in the order they ended: one pass over a history of any length, holding one
        batch."""
        with self._lock:
            batches = self._spill.batch_count()
            buffered = [o for o in self._buffer if probes is None or o.probe in probes]
        for batch in range(batches):
            with self._lock:
                ops = self._spill.batch_ops(batch, probes)
            if ops:
                yield ops
        if buffered:
            yield buffered

    def since(self, start: int) -> list[Op]:
        """The ops appended from the `start`th on that the window still holds: what a live
        view has not seen yet (one that fell more than `WINDOW` ops behind misses the oldest)."""
        with self._lock:
            first = self._count - len(self._window)
            return list(islice(self._window, max(0, start - first), None))

    def __iter__(self) -> Iterator[Op]:
        """Every op, in the order they ended, read from the spill a batch at a time."""
        for batch in self.batches(None):
            yield from batch

    def __len__(self) -> int:
        with self._lock:
            return self._count

    @overload
    def __getitem__(self, index: int) -> Op: ...
    @overload
    def __getitem__(self, index: slice) -> list[Op]: ...
    def __getitem__(self, index: int | slice) -> Op | list[Op]:
        return self.ops()[index]

    def write_jsonl(self, path: Path) -> None:
        """Every op as a JSON line, in the order they ended; a spilled batch at a time."""
        with path.open("w") as f:
            self.write_to(f)

    def write_to(self, f: TextIO) -> None:
        """`write_jsonl`'s lines, to an open file."""
        with self._lock:
            batches = self._spill.batch_count()
            buffered = list(self._buffer)
        for batch in range(batches):
            with self._lock:
                text = self._spill.batch_jsonl(batch)
            # A driver error may quote the URI it was given: its password is masked.
            f.write(redact_uri(text))
        f.write(redact_uri("".join(op_jsonl(op) for op in buffered)))

    @classmethod
    def read_jsonl(cls, path: Path) -> History:
        """A history as `write_jsonl` wrote it, for re-analysis."""
        with path.open() as lines:
            return cls.from_ops(Op(**json.loads(line)) for line in lines)

    @classmethod
    def from_ops(cls, ops: Iterable[Op]) -> History:
        history = cls()
        for op in ops:
            history.append(op)
        return history


def op_jsonl(op: Op) -> str:
    """`op` as a line of history.jsonl (before redaction)."""
    return json.dumps(asdict(op), default=str) + "\n"


def of_probes(ops: Sequence[Op], *probes: str) -> list[Op]:
    """The ops of `probes`, in `ops`' order; from a History, read without the other probes'."""
    if isinstance(ops, History):
        return ops.of_probes(probes)
    wanted = set(probes)
    return [op for op in ops if op.probe in wanted]


def probe_counts(ops: Sequence[Op]) -> Counter[str]:
    """How many ops each probe recorded."""
    return ops.probes() if isinstance(ops, History) else Counter(op.probe for op in ops)


def columns(ops: Sequence[Op], *probes: str, fields: Collection[str] = ALL,
            ordered: bool = True) -> OpColumns:  # fmt: skip
    """The ops of `probes` as arrays, in `ops`' order (see `OpColumns`; any order unless
    `ordered`); from a History, only the columns `fields` are read."""
    if isinstance(ops, History):
        return ops.columns(probes, fields, ordered=ordered)
    places = [i for i, op in enumerate(ops) if op.probe in probes]
    return OpColumns.of([ops[i] for i in places], indices=places)


def batches(ops: Sequence[Op], *probes: str) -> Iterator[list[Op]]:
    """The ops of `probes` in lists of bounded size (from a History; a list: in one), in
    `ops`' order."""
    if isinstance(ops, History):
        yield from ops.batches(probes)
    else:
        yield of_probes(ops, *probes)


def column_parts(
    ops: Sequence[Op],
    *probes: str,
    fields: Collection[str] = ALL,
    ended: tuple[float, float] | None = None,
) -> Iterator[OpColumns]:
    """The ops of `probes` as columns in parts of bounded size (a list: in one), in no
    particular order; only those whose `t_end` is in `ended` (from, to: to excluded)."""
    if isinstance(ops, History):
        yield from ops.column_parts(probes, fields, ended)
        return
    cols = columns(ops, *probes)
    if ended is not None:
        cols = cols.where((cols.t_end >= ended[0]) & (cols.t_end < ended[1]))
    yield cols


def ops_at(ops: Sequence[Op], indices: Sequence[int]) -> list[Op]:
    """The ops of `ops` at the places `indices` (`OpColumns.index`)."""
    return ops.ops_at(indices) if isinstance(ops, History) else [ops[i] for i in indices]


def flags(ops: Sequence[Op], probe: str, *tests: Callable[[Op], bool]) -> list[NDArray[np.bool_]]:
    """Each of `tests` on every op of `probe`, as boolean arrays in the order of
    `columns(ops, probe)`: what an op's detail says, without holding the ops."""
    import numpy as np

    found: list[list[bool]] = [[] for _ in tests]
    for batch in batches(ops, probe):
        for values, test in zip(found, tests, strict=True):
            values.extend(test(op) for op in batch)
    return [np.array(values, dtype=bool) for values in found]


def last_end(ops: Sequence[Op]) -> float:
    """The latest `t_end` of any op in `ops` (0.0 without ops)."""
    if isinstance(ops, History):
        return ops.last_end
    return max((op.t_end for op in ops), default=0.0)
