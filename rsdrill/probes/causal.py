"""The causal sessions of the causal-consistency checker (rsdrill/analysis/causal.py).

Each client owns one document (`c<i>`) and keeps one causally consistent session for the whole
run, across failovers, as an application does. Every interval it alternates:

- a write to its document: `$inc n`, `last` = the write's seq (1, 2, 3, ...), `after` = the
  `last` of every other document in its previous read; retries off, so a failed write may or
  may not have been applied (the checker owes only acknowledged ones);
- a read of every document in one query (one snapshot), from the members the read preference
  allows, at the probe's read concern.

Each attempt is one op of probe "causal": op "write" with the client, key, seq and after; op
"read" with each document as `[n, last, after]`.
"""

from __future__ import annotations

from typing import Any

from pymongo import MongoClient, ReadPreference, WriteConcern
from pymongo.read_concern import ReadConcern

from rsdrill.history import CAUSAL_PROBE, History, RunClock
from rsdrill.probes.availability import PROBE_DB, probe_client
from rsdrill.probes.base import Probe, ServedBy, classify, timed

_READ_PREFERENCES = {
    "primary": ReadPreference.PRIMARY,
    "primaryPreferred": ReadPreference.PRIMARY_PREFERRED,
    "secondary": ReadPreference.SECONDARY,
    "secondaryPreferred": ReadPreference.SECONDARY_PREFERRED,
    "nearest": ReadPreference.NEAREST,
}


def key_of(client_id: int) -> str:
    return f"c{client_id}"


def prepare(uri: str, collection: str, clients: int) -> None:
    """Every client's document, at no write yet, on a majority."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=30_000)
    with client:
        coll = client[PROBE_DB].get_collection(collection, write_concern=WriteConcern("majority"))
        for i in range(clients):
            coll.replace_one({"_id": key_of(i)}, {"_id": key_of(i), "n": 0, "last": 0,
                                                  "after": {}}, upsert=True)  # fmt: skip


class CausalClient(Probe):
    name = CAUSAL_PROBE

    def __init__(self, history: History, clock: RunClock, *, uri: str, collection: str,
                 client_id: int, clients: int, read_preference: str, read_concern: str,
                 write_concern: int | str, interval_s: float,
                 timeout_s: float) -> None:  # fmt: skip
        super().__init__(history, clock, interval_s)
        self.client_id = client_id
        self._key = key_of(client_id)
        self._keys = [key_of(i) for i in range(clients)]
        self._served = ServedBy()
        self._client: MongoClient[dict[str, Any]] = probe_client(
            uri, timeout_s, retry_writes=False, retry_reads=False, listener=self._served
        )
        db = self._client[PROBE_DB]
        self._writes = db.get_collection(collection, write_concern=WriteConcern(write_concern))
        self._reads = db.get_collection(
            collection,
            read_preference=_READ_PREFERENCES[read_preference],
            read_concern=ReadConcern(read_concern),
        )
        self._session = self._client.start_session(causal_consistency=True)
        self._seq = 0
        self._read_next = False
        self._seen: dict[str, int] = {}  # `last` of every other document, as last read

    def tick(self) -> None:
        self._served.reset()
        if self._read_next:
            self._read()
        else:
            self._write()
        self._read_next = not self._read_next

    def _write(self) -> None:
        self._seq += 1
        seq, after = self._seq, dict(self._seen)
        t_start, _, error = timed(self.clock, lambda: self._writes.update_one(
            {"_id": self._key},
            {"$inc": {"n": 1}, "$set": {"last": seq, "after": after}},
            session=self._session,
        ))  # fmt: skip
        outcome, detail = ("ok", {}) if error is None else classify(error)
        self.record("write", self._served.last, t_start, outcome,
                    {"client": self.client_id, "key": self._key, "seq": seq, "after": after,
                     **detail})  # fmt: skip

    def _read(self) -> None:
        t_start, found, error = timed(self.clock, lambda: list(
            self._reads.find({"_id": {"$in": self._keys}}, session=self._session)
        ))  # fmt: skip
        if error is not None:
            outcome, detail = classify(error)
            self.record("read", self._served.last, t_start, outcome,
                        {"client": self.client_id, "key": self._key, **detail})  # fmt: skip
            return
        docs = {str(d["_id"]): [int(d.get("n", 0)), int(d.get("last", 0)), d.get("after") or {}]
                for d in found}  # fmt: skip
        self._seen = {str(d["_id"]): int(d.get("last", 0)) for d in found
                      if d["_id"] != self._key}  # fmt: skip
        self.record("read", self._served.last, t_start, "ok",
                    {"client": self.client_id, "key": self._key, "docs": docs})  # fmt: skip

    def close(self) -> None:
        self._session.end_session()
        self._client.close()
