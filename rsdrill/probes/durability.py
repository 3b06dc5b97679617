"""The durability ledger: every acknowledged write has a sequence number; after recovery they
are read back with majority read concern, and the acknowledged ones that are missing are lost."""

from __future__ import annotations

import time
from collections import Counter

from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

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
    acknowledged = {
        op.detail["seq"] for op in ledger.history.ops(ledger.name) if op.op == "insert" and op.ok
    }
    coll = ledger.collection.with_options(read_concern=ReadConcern("majority"))
    t_start = ledger.clock.now()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            # Seqs: a write loop's _id is its id_base + the seq.
            seen = Counter(doc["_id"] - ledger.id_base for doc in coll.find({}, {"_id": 1}))
            break
        except PyMongoError as exc:
            if time.monotonic() > deadline:
                _, detail = classify(exc)
                ledger.record("readback", None, t_start, "error", {**detail, "of": ledger.name},
                              probe=LEDGER)  # fmt: skip
                return
            time.sleep(0.2)
    missing = sorted(acknowledged - set(seen))
    duplicated = sorted(seq for seq, n in seen.items() if n > 1)
    detail = {"checked": len(acknowledged), "missing": missing, "duplicated": duplicated,
              "of": ledger.name}  # fmt: skip
    ledger.record("readback", None, t_start, "ok", detail, probe=LEDGER)
