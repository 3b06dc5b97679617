"""Durability: which acknowledged writes the replica set kept.

Read from the ledger probe: every insert carries a sequence number (`detail.seq`); at the end
one "readback" op lists the acknowledged seqs a majority read no longer finds
(`detail.missing`), or fails. The inserts are the "ledger" probe's own, or those of the probe the
readback names (`detail.of`: the availability probe's "write" when the ledger shares its writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rsdrill.history import LEDGER_PROBE, Op, of_probes


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
    readbacks = sorted(
        (op for op in of_probes(ops, LEDGER_PROBE) if op.op == "readback"),
        key=lambda o: o.t_end,
    )
    inserts = ledger_inserts(ops)
    acknowledged = [op for op in inserts if op.ok]
    result = Durability(acknowledged_writes=len(acknowledged) if inserts else None)
    if not readbacks or not readbacks[-1].ok:
        return result
    acked_seqs = {op.detail.get("seq") for op in acknowledged}
    lost = sorted(s for s in set(readbacks[-1].detail.get("missing", [])) if s in acked_seqs)
    duplicated = readbacks[-1].detail.get("duplicated")
    return Durability(result.acknowledged_writes, len(lost), lost,
                      None if duplicated is None else len(duplicated))  # fmt: skip


def ledger_inserts(ops: Sequence[Op]) -> list[Op]:
    """The ledger's insert attempts: those of the probe the last readback names (`detail.of`),
    the "ledger" probe's own without one."""
    readbacks = [op for op in of_probes(ops, LEDGER_PROBE) if op.op == "readback"]
    source = (
        max(readbacks, key=lambda o: o.t_end).detail.get("of", LEDGER_PROBE)
        if readbacks
        else LEDGER_PROBE
    )
    return [op for op in of_probes(ops, source) if op.op == "insert"]


def _readbacks(ops: Sequence[Op]) -> list[Op]:
    return [op for op in of_probes(ops, LEDGER_PROBE) if op.op == "readback"]
