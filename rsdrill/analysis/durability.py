"""Durability: which acknowledged writes the replica set kept.

Read from the ledger probe: every insert carries a sequence number (`detail.seq`); at the end
one "readback" op lists the acknowledged seqs a majority read no longer finds
(`detail.missing`), or fails. The inserts are the "ledger" probe's own, or those of the probe the
readback names (`detail.of`: the availability probe's "write" when the ledger shares its writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rsdrill.history import LEDGER_PROBE, Op, column_parts, of_probes
from rsdrill.opcolumns import SEQS

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


@dataclass(frozen=True)
class Durability:
    """The ledger's verdict on acknowledged writes."""

    acknowledged_writes: int | None = None
    lost_acknowledged_writes: int | None = None
    lost_acknowledged_seqs: list[int] = field(default_factory=list)
    duplicated_writes: int | None = None


def durability(ops: Sequence[Op]) -> Durability:
    """Count acknowledged ledger writes and those lost.

    - acknowledged_writes: the number of successful ledger inserts; None without ledger inserts;
    - lost_acknowledged_seqs: the readback's `missing` seqs that an acknowledged insert carried
      (sorted, each once); lost_acknowledged_writes is their number. Both are unknown (None and
      []) when there is no readback or the last readback failed;
    - duplicated_writes: how many seqs the readback found more than once (`duplicated`; a
      readback of an older rsdrill that did not look: None).
    """
    import numpy as np

    readbacks = sorted(_readbacks(ops), key=lambda o: o.t_end)
    source = ledger_source(readbacks)
    tried = acknowledged = 0
    for part in column_parts(ops, source, fields=SEQS):
        inserts = part.op == part.code("op", "insert")
        tried += int(inserts.sum())
        acknowledged += int((inserts & part.ok).sum())
    result = Durability(acknowledged_writes=acknowledged if tried else None)
    if not readbacks or not readbacks[-1].ok:
        return result
    missing = sorted({s for s in readbacks[-1].detail.get("missing", []) if _is_seq(s)})
    acked = np.zeros(len(missing), dtype=bool)  # a part at a time: the missing are few
    for part in column_parts(ops, source, fields=SEQS):
        inserted = part.ok & (part.op == part.code("op", "insert"))
        acked |= np.isin(missing, part.seq[inserted])
    lost = [s for s, kept in zip(missing, acked.tolist(), strict=True) if kept]
    duplicated = readbacks[-1].detail.get("duplicated")
    return Durability(result.acknowledged_writes, len(lost), lost,
                      None if duplicated is None else len(duplicated))  # fmt: skip


def ledger_source(readbacks: Sequence[Op]) -> str:
    """The probe whose inserts are the ledger: the one the last readback names (`detail.of`),
    the "ledger" probe itself without one."""
    if not readbacks:
        return LEDGER_PROBE
    return str(max(readbacks, key=lambda o: o.t_end).detail.get("of", LEDGER_PROBE))


def ledger_inserts(ops: Sequence[Op]) -> list[Op]:
    """The ledger's insert attempts (of `ledger_source`'s probe)."""
    return [op for op in of_probes(ops, ledger_source(_readbacks(ops))) if op.op == "insert"]


def acknowledged_seqs(ops: Sequence[Op], probe: str) -> NDArray[np.int64]:
    """The seqs of `probe`'s acknowledged inserts, sorted, each once."""
    import numpy as np

    seqs = []
    for part in column_parts(ops, probe, fields=SEQS):  # a day's run: millions of inserts
        acked = part.ok & (part.op == part.code("op", "insert")) & (part.seq >= 0)
        seqs.append(part.seq[acked])
    return np.unique(np.concatenate([np.empty(0, dtype=np.int64), *seqs]))


def _readbacks(ops: Sequence[Op]) -> list[Op]:
    return [op for op in of_probes(ops, LEDGER_PROBE) if op.op == "readback"]


def _is_seq(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
