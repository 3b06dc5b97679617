"""Rollback accounting: what each member's rollbacks took, matched against the probes' writes.

mongod saves the documents a rollback undoes to `<dbpath>/rollback/…` files and counts its
rollbacks in its rollback id (`serverStatus` `repl.rbid`). A probe writes `{_id: seq}` and
records each acknowledged seq; a rolled-back document whose `_id` is such a seq is a write the
probe saw acknowledged and the set then lost, at the probe's write concern (w:1 allows it,
w:majority never should). Pure functions of what the members said and the run's history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rsdrill.analysis.durability import acknowledged_seqs
from rsdrill.history import Op

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
from rsdrill.result import AuditResult, AuditRollback, RolledBackWrites


@dataclass(frozen=True)
class RollbackFile:
    """One `removed.<time>.bson` file: the documents one rollback took from one collection."""

    namespace: str
    path: str
    ids: tuple[Any, ...]


@dataclass(frozen=True)
class Writer:
    """A probe that inserts `{_id: seq}` into one namespace and records the seq it sent."""

    probe: str
    namespace: str
    write_concern: str


def write_concern_words(document: Mapping[str, Any]) -> str:
    """A write concern as a result says it: `w:1`, `w:majority, j:true`."""
    return ", ".join(f"{k}:{str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in sorted(document.items(), key=lambda kv: kv[0] != "w"))  # fmt: skip


def account(
    before: Mapping[str, int | None],
    after: Mapping[str, int | None],
    files: Mapping[str, Sequence[RollbackFile] | None],
    writers: Sequence[Writer],
    ops: Sequence[Op],
) -> list[AuditRollback]:
    """Each member that rolled back during the run (its rollback id moved) or left rollback
    files: how many rollbacks, the documents they took per namespace, and which of them were
    acknowledged writes of a probe. `files[member]` None: its files are not readable here."""
    import numpy as np

    writer_of = {w.namespace: w for w in writers}
    acked: dict[str, NDArray[np.int64]] = {}  # each writer's, read once when needed
    out = []
    for member in sorted(set(before) | set(after) | set(files)):
        start, end = before.get(member), after.get(member)
        moved = None if start is None or end is None else end - start
        found = files.get(member)
        unknown = moved is None and found is None  # neither its id nor its files could be read
        if not moved and not found and not unknown:
            continue
        entry = AuditRollback(member=member, rollbacks=moved, readable=found is not None)
        for file in found or ():
            entry.files.append(file.path)
            entry.namespaces[file.namespace] = entry.namespaces.get(file.namespace, 0) + len(
                file.ids
            )
            writer = writer_of.get(file.namespace)
            ids = sorted(i for i in file.ids if isinstance(i, int))
            taken: list[int] = []
            if writer is not None and ids:
                if writer.probe not in acked:
                    acked[writer.probe] = acknowledged_seqs(ops, writer.probe)
                kept = np.isin(ids, acked[writer.probe]).tolist()
                taken = [i for i, k in zip(ids, kept, strict=True) if k]
            if writer is not None and taken:
                entry.acknowledged.append(
                    RolledBackWrites(probe=writer.probe, write_concern=writer.write_concern,
                                     seqs=taken)
                )  # fmt: skip
        out.append(entry)
    return out


def rollback_figures(audit: AuditResult | None) -> tuple[int | None, int | None]:
    """(rolled_back_writes, rolled_back_acknowledged_writes) of a run's audit: None when not
    known (no audit, or a member that rolled back, or may have, whose files could not be read).
    The documents are counted on each member that rolled them back; an acknowledged write
    once, however many members rolled it back (the lost data centre's two members of a 2+1
    set both roll back the writes the survivor never had)."""
    if audit is None or not audit.rollbacks_accounted:
        return None, None
    if any(not r.readable for r in audit.rollbacks):
        return None, None
    documents = sum(sum(r.namespaces.values()) for r in audit.rollbacks)
    taken = {(w.probe, seq) for r in audit.rollbacks for w in r.acknowledged for seq in w.seqs}
    return documents, len(taken)
