"""A disaster-recovery drill's numbers: how long until the set took writes again after the data
was lost (RTO), and how much acknowledged data the restore did not bring back (RPO).

The disaster is the first `data-loss` fault's injection (on the last of its members); the
backup marker is the start of the step marked `backup` (writes acknowledged before it must be
in the backup); the restore is the step marked `restore`. Writes are the availability probe's
and the ledger's; what survived is the ledger's readback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rsdrill.analysis.durability import durability, ledger_inserts
from rsdrill.history import FaultRecord, Op, of_probes


@dataclass(frozen=True)
class DisasterRecovery:
    rto_s: float | None = None
    rpo_s: float | None = None
    restore_s: float | None = None
    lost_before_backup: int | None = None


def disaster_recovery(ops: Sequence[Op], faults: Sequence[FaultRecord]) -> DisasterRecovery:
    """The drill's metrics; all None when the run lost no data on purpose.

    - rto_s: the disaster → the end of the first successful write that started after it;
    - rpo_s: from the acknowledgement of the newest ledger write that was acknowledged
      before it and is still there after the restore, to the disaster (None without a
      successful readback, or when no such write survived);
    - restore_s: how long the step marked restore ran;
    - lost_before_backup: acknowledged ledger writes lost although acknowledged before the
      backup began (a backup that misses them is broken; should be 0). None without a backup
      step or a readback.
    """
    losses = [f for f in faults if f.kind == "data-loss" and f.injected_at_s is not None]
    if not losses:
        return DisasterRecovery()
    # The first data-loss fault's last member: from then on the data is gone.
    first = min(f.index for f in losses)
    disaster = max(f.injected_at_s or 0.0 for f in losses if f.index == first)
    writes = sorted(
        (o for o in of_probes(ops, "write", "ledger")
         if o.ok and o.op == "insert" and o.t_start >= disaster),
        key=lambda o: o.t_end,
    )  # fmt: skip
    rto = writes[0].t_end - disaster if writes else None
    restore = _step(ops, "restore")
    backup = _step(ops, "backup")
    ledger = durability(ops)
    rpo = lost_before = None
    if ledger.lost_acknowledged_writes is not None:
        lost = set(ledger.lost_acknowledged_seqs)
        acked = [o for o in ledger_inserts(ops) if o.ok]
        kept = [o.t_end for o in acked if o.t_end <= disaster and o.detail.get("seq") not in lost]
        rpo = disaster - max(kept) if kept else None
        if backup is not None:
            before = [o for o in acked if o.t_end <= backup.t_start]
            lost_before = sum(1 for o in before if o.detail.get("seq") in lost)
    return DisasterRecovery(
        rto_s=rto,
        rpo_s=rpo,
        restore_s=restore.t_end - restore.t_start if restore is not None and restore.ok else None,
        lost_before_backup=lost_before,
    )


def _step(ops: Sequence[Op], marks: str) -> Op | None:
    """The last step marked `marks` (the one that counts when a drill repeats it)."""
    found = [o for o in of_probes(ops, "step") if o.detail.get("marks") == marks]
    return max(found, key=lambda o: o.t_start) if found else None
