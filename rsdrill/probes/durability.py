"""The durability ledger: every acknowledged write has a sequence number; after recovery they
are read back with majority read concern, and the acknowledged ones that are missing are lost."""

from __future__ import annotations

import time
from array import array

from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

from rsdrill.analysis.durability import acknowledged_seqs
from rsdrill.history import LEDGER_PROBE
from rsdrill.probes.availability import WriteLoop
from rsdrill.probes.base import classify

LEDGER = LEDGER_PROBE


def readback(ledger: WriteLoop, timeout_s: float) -> None:
    """Record one "readback" op of the "ledger" probe: which acknowledged seqs a majority read
    cannot find, and which it finds more than once (`duplicated`: through a sharded cluster's
    routers, one document owned by two shards); `detail.of` names the probe whose inserts were
    the ledger.

    Retries until `timeout_s` so that a set still electing or catching up is given the chance
    to answer; a failure to read at all is recorded as an error (lost writes unknown).
    """
    import numpy as np

    acknowledged = acknowledged_seqs(ledger.history, ledger.name)
    coll = ledger.collection.with_options(read_concern=ReadConcern("majority"))
    t_start = ledger.clock.now()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            # Seqs: a write loop's _id is its id_base + the seq. Held as 8 bytes each: a run
            # of a day reads back millions.
            ids = array("q", (doc["_id"] - ledger.id_base for doc in coll.find({}, {"_id": 1})))
            break
        except PyMongoError as exc:
            if time.monotonic() > deadline:
                _, detail = classify(exc)
                ledger.record("readback", None, t_start, "error", {**detail, "of": ledger.name},
                              probe=LEDGER)  # fmt: skip
                return
            time.sleep(0.2)
    seen, times = np.unique(np.frombuffer(ids, dtype=np.int64), return_counts=True)
    missing = acknowledged[~np.isin(acknowledged, seen)].tolist()
    duplicated = seen[times > 1].tolist()
    detail = {"checked": len(acknowledged), "missing": missing, "duplicated": duplicated,
              "of": ledger.name}  # fmt: skip
    ledger.record("readback", None, t_start, "ok", detail, probe=LEDGER)
