"""A YCSB-like workload (A: 50 % reads, 50 % updates; B: 95 % / 5 %; C: reads only) over
zipfian keys, at a fixed rate; its latencies show degradation (IOPS ceilings, cold caches) that
up/down cannot."""

from __future__ import annotations

import bisect
import itertools
import random
from typing import Any

from pymongo import MongoClient, WriteConcern

from rsdrill.history import History, RunClock
from rsdrill.probes.availability import PROBE_DB, probe_client
from rsdrill.probes.base import Probe, ServedBy, classify, timed

READ_SHARE = {"a": 0.5, "b": 0.95, "c": 1.0}
# YCSB's default skew: a few keys are hot, most are cold.
ZIPF_THETA = 0.99


class KeyChooser:
    """Draws record numbers 0..n-1, zipfian (key 0 hottest) or uniform."""

    def __init__(self, records: int, distribution: str, rng: random.Random) -> None:
        self._rng = rng
        self._n = records
        self._cdf: list[float] | None = None
        if distribution == "zipfian":
            weights = [1.0 / (i + 1) ** ZIPF_THETA for i in range(records)]
            total = sum(weights)
            self._cdf = list(itertools.accumulate(w / total for w in weights))

    def next(self) -> int:
        if self._cdf is None:
            return self._rng.randrange(self._n)
        return min(bisect.bisect_left(self._cdf, self._rng.random()), self._n - 1)


class LoadWorker(Probe):
    name = "load"

    def __init__(
        self,
        history: History,
        clock: RunClock,
        *,
        client: MongoClient[dict[str, Any]],
        served: ServedBy,
        collection: str,
        interval_s: float,
        read_share: float,
        keys: KeyChooser,
        record_bytes: int,
        w: int | str,
        rng: random.Random,
    ) -> None:
        super().__init__(history, clock, interval_s)
        self._served = served
        self._coll = client[PROBE_DB].get_collection(collection, write_concern=WriteConcern(w=w))
        self._read_share = read_share
        self._keys = keys
        self._rng = rng
        self._pad = "x" * record_bytes

    def tick(self) -> None:
        key = self._keys.next()
        self._served.reset()
        if self._rng.random() < self._read_share:
            op = "read"
            t_start, _, error = timed(self.clock, lambda: self._coll.find_one({"_id": key}))
        else:
            op = "update"
            value = f"{self._rng.random():.6f}{self._pad}"
            t_start, _, error = timed(
                self.clock,
                lambda: self._coll.update_one({"_id": key}, {"$set": {"field0": value}}),
            )
        if error is None:
            self.record(op, self._served.last, t_start, "ok", {"key": key})
        else:
            outcome, detail = classify(error)
            self.record(op, self._served.last, t_start, outcome, {"key": key, **detail})


def preload(uri: str, collection: str, records: int, record_bytes: int) -> None:
    """Insert the records the workload reads and updates (majority-acknowledged)."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=30_000)
    with client:
        coll = client[PROBE_DB].get_collection(collection, write_concern=WriteConcern("majority"))
        coll.drop()
        pad = "x" * record_bytes
        for first in range(0, records, 1000):
            coll.insert_many(
                [{"_id": i, "field0": pad} for i in range(first, min(first + 1000, records))]
            )


def build_load(
    history: History,
    clock: RunClock,
    *,
    uri: str,
    collection: str,
    workload: str,
    rate: float,
    threads: int,
    records: int,
    record_bytes: int,
    distribution: str,
    timeout_s: float,
    w: int | str,
    seed: int,
) -> tuple[MongoClient[dict[str, Any]], list[LoadWorker]]:
    """The workload's shared client and its worker threads (not started)."""
    served = ServedBy()
    client = probe_client(uri, timeout_s, retry_writes=True, retry_reads=True, listener=served)
    workers = []
    for i in range(threads):
        rng = random.Random(seed + i)
        workers.append(
            LoadWorker(
                history,
                clock,
                client=client,
                served=served,
                collection=collection,
                interval_s=threads / rate,
                read_share=READ_SHARE[workload],
                keys=KeyChooser(records, distribution, rng),
                record_bytes=record_bytes,
                w=w,
                rng=rng,
            )
        )
    return client, workers
