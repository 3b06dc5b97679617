"""Availability: a write loop and a read loop through pymongo, as an application would see it.

Short socket, connect and server-selection timeouts make a silently dead primary show up as
failed attempts instead of one long hang; retries off measure the raw gap, on measure what an
application with retryable writes/reads experiences.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from pymongo import MongoClient, WriteConcern
from pymongo.collection import Collection
from pymongo.read_preferences import make_read_preference, read_pref_mode_from_name

from rsdrill.history import History, RunClock
from rsdrill.probes.base import Probe, ServedBy, classify, timed

PROBE_DB = "rsdrill_probe"


def probe_client(
    uri: str,
    timeout_s: float,
    *,
    retry_writes: bool,
    retry_reads: bool,
    read_preference: str = "primary",
    listener: ServedBy | None = None,
) -> MongoClient[dict[str, Any]]:
    """A client whose every wait is bounded by the probe's timeout."""
    ms = max(int(timeout_s * 1000), 1)
    return MongoClient(
        uri,
        socketTimeoutMS=ms,
        connectTimeoutMS=ms,
        serverSelectionTimeoutMS=ms,
        retryWrites=retry_writes,
        retryReads=retry_reads,
        readPreference=read_preference,
        appname="rsdrill-probe",
        event_listeners=[listener] if listener else [],
    )


def write_concern(w: int | str, journal: bool | None) -> WriteConcern:
    return WriteConcern(w=w, j=journal) if journal is not None else WriteConcern(w=w)


class WriteLoop(Probe):
    """Inserts `{_id: seq}` every interval; each attempt is one history op with its seq."""

    records_late_starts = True

    def __init__(
        self,
        name: str,
        history: History,
        clock: RunClock,
        *,
        uri: str,
        collection: str,
        interval_s: float,
        timeout_s: float,
        w: int | str,
        journal: bool | None,
        retries: bool,
        id_base: int = 0,
    ) -> None:
        self.name = name
        super().__init__(history, clock, interval_s)
        # Each insert's _id is id_base + its seq (a shard's probe writes in its own chunk).
        self.id_base = id_base
        self._served = ServedBy()
        self._client = probe_client(
            uri, timeout_s, retry_writes=retries, retry_reads=retries, listener=self._served
        )
        self.collection: Collection[dict[str, Any]] = self._client[PROBE_DB].get_collection(
            collection, write_concern=write_concern(w, journal)
        )
        self.seq = 0
        # When the last insert was acknowledged (run seconds); the raw writer skips a tick then.
        self.last_acknowledged_s: float | None = None

    def tick(self) -> None:
        self.seq += 1
        seq = self.seq
        self._served.reset()
        t_start, _, error = timed(
            self.clock,
            lambda: self.collection.insert_one(
                {"_id": self.id_base + seq, "at": dt.datetime.now(dt.UTC)}
            ),
        )
        if error is None:
            self.record("insert", self._served.last, t_start, "ok", {"seq": seq})
            self.last_acknowledged_s = self.clock.now()
        else:
            outcome, detail = classify(error)
            self.record("insert", self._served.last, t_start, outcome, {"seq": seq, **detail})

    def close(self) -> None:
        self._client.close()


class ReadLoop(Probe):
    """Reads one document every interval with the configured read preference."""

    name = "read"
    records_late_starts = True

    def __init__(
        self,
        history: History,
        clock: RunClock,
        *,
        uri: str,
        collection: str,
        interval_s: float,
        timeout_s: float,
        read_preference: str,
        retries: bool,
        read_tags: Sequence[Mapping[str, str]] = (),
    ) -> None:
        super().__init__(history, clock, interval_s)
        self._served = ServedBy()
        self._client = probe_client(
            uri,
            timeout_s,
            retry_writes=retries,
            retry_reads=retries,
            read_preference=read_preference,
            listener=self._served,
        )
        # The mode with its tag sets, selected by pymongo's own server selection.
        mode = make_read_preference(read_pref_mode_from_name(read_preference),
                                    [dict(t) for t in read_tags] or None)  # fmt: skip
        self.collection = self._client[PROBE_DB].get_collection(collection, read_preference=mode)

    def tick(self) -> None:
        self._served.reset()
        t_start, _, error = timed(self.clock, lambda: self.collection.find_one({"_id": 1}))
        if error is None:
            self.record("find", self._served.last, t_start, "ok")
        else:
            outcome, detail = classify(error)
            self.record("find", self._served.last, t_start, outcome, detail)

    def close(self) -> None:
        self._client.close()
