"""The list-append transactions of the anomaly checker (rsdrill/analysis/elle.py).

Each client runs one multi-document transaction per interval: snapshot read concern, majority
writes, 1-4 micro-ops over a few keys, each an append of a value no other append uses
(`$push` to the key's document) or a read of the key's whole list. Several clients run at once,
so that their transactions overlap as an application's do. Each attempt is one op of probe
"txn" with the micro-ops and how the transaction ended, as the client knows it:

- ok: committed;
- fail: certainly not committed (an error before the commit, or one labelled
  TransientTransactionError: the server aborted it);
- info: unknown (the commit's reply was lost: UnknownTransactionCommitResult, a timeout).

Reads are recorded only for committed transactions: an aborted transaction's reads say nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
from typing import Any

from pymongo import MongoClient, WriteConcern
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

from rsdrill.history import TXN_PROBE, History, RunClock
from rsdrill.probes.availability import PROBE_DB, probe_client
from rsdrill.probes.base import Probe, ServedBy, classify

_TRANSIENT = "TransientTransactionError"


class Appends:
    """Unique values for every client's appends (one counter for the whole run)."""

    def __init__(self) -> None:
        self._next = itertools.count(1)
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            return next(self._next)


class ListAppendClient(Probe):
    name = TXN_PROBE

    def __init__(self, history: History, clock: RunClock, *, uri: str, collection: str,
                 client_id: int, keys: int, txn_len: tuple[int, int], appends: Appends,
                 interval_s: float, timeout_s: float, seed: int) -> None:  # fmt: skip
        super().__init__(history, clock, interval_s)
        self.client_id = client_id
        self._keys = keys
        self._txn_len = txn_len
        self._appends = appends
        self._rng = random.Random(seed * 1000 + client_id)
        self._served = ServedBy()
        self._client: MongoClient[dict[str, Any]] = probe_client(
            uri, timeout_s, retry_writes=False, retry_reads=False, listener=self._served
        )
        self._coll = self._client[PROBE_DB][collection]
        self._session = self._client.start_session(causal_consistency=False)

    def _micro_ops(self) -> list[list[Any]]:
        mops: list[list[Any]] = []
        for _ in range(self._rng.randint(*self._txn_len)):
            key = self._rng.randrange(self._keys)
            if self._rng.random() < 0.5:
                mops.append(["append", key, self._appends.take()])
            else:
                mops.append(["r", key, None])
        return mops

    def tick(self) -> None:
        mops = self._micro_ops()
        self._served.reset()
        t_start = self.clock.now()
        status, committing = "fail", False
        detail: dict[str, Any] = {}
        try:
            self._session.start_transaction(
                read_concern=ReadConcern("snapshot"), write_concern=WriteConcern("majority")
            )
            for mop in mops:
                if mop[0] == "append":
                    self._coll.update_one({"_id": mop[1]}, {"$push": {"v": mop[2]}},
                                          upsert=True, session=self._session)  # fmt: skip
                else:
                    doc = self._coll.find_one({"_id": mop[1]}, session=self._session)
                    mop[2] = list(doc.get("v", [])) if doc else []
            committing = True
            self._session.commit_transaction()
            status = "ok"
        except PyMongoError as exc:
            _, detail = classify(exc)
            if committing and not exc.has_error_label(_TRANSIENT):
                status = "info"  # the commit may have taken effect
            self._renew_session()
        if status != "ok":
            for mop in mops:
                if mop[0] == "r":
                    mop[2] = None
        outcome = "ok" if status == "ok" else "error"
        detail.update(status=status, client=self.client_id, mops=mops)
        self.record("txn", self._served.last, t_start, outcome, detail)

    def _renew_session(self) -> None:
        """A fresh session after a failed transaction: the old one's transaction is aborted
        (or left to the server, which drops it after transactionLifetimeLimitSeconds)."""
        with contextlib.suppress(PyMongoError):
            self._session.end_session()
        self._session = self._client.start_session(causal_consistency=False)

    def close(self) -> None:
        self._session.end_session()
        self._client.close()


def prepare(uri: str, collection: str) -> None:
    """The collection the transactions write, created before the first of them."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=30_000)
    with client:
        db = client[PROBE_DB]
        if collection not in db.list_collection_names():
            db.create_collection(collection, write_concern=WriteConcern("majority"))
