"""The register: one document's value, written by one writer (1, 2, 3, ... at w:majority) and
read at readConcern majority in a causally consistent session, for the soak's invariant checks
(linearizability of the register, monotonic reads; see `rsdrill/analysis/invariants.py`).

Each attempt is one op of probe "register": op "write" with the value it set, op "read" with
the value it saw. A write that fails may still have been applied (a lost reply), so the checker
treats it as indeterminate, as Jepsen's histories do with `info` operations.
"""

from __future__ import annotations

from typing import Any

from pymongo import ReadPreference, WriteConcern
from pymongo.read_concern import ReadConcern

from rsdrill.history import History, RunClock
from rsdrill.probes.availability import PROBE_DB, probe_client
from rsdrill.probes.base import Probe, ServedBy, classify, timed

REGISTER_ID = "register"


class RegisterWriter(Probe):
    """Sets the register to the next value every interval (w:majority, retries off)."""

    name = "register"

    def __init__(self, history: History, clock: RunClock, *, uri: str, collection: str,
                 interval_s: float, timeout_s: float) -> None:  # fmt: skip
        super().__init__(history, clock, interval_s)
        self._served = ServedBy()
        self._client = probe_client(uri, timeout_s, retry_writes=False, retry_reads=False,
                                    listener=self._served)  # fmt: skip
        self._coll = self._client[PROBE_DB].get_collection(
            collection, write_concern=WriteConcern("majority")
        )
        self.value = 0

    def tick(self) -> None:
        self.value += 1
        value = self.value
        self._served.reset()
        t_start, _, error = timed(
            self.clock,
            lambda: self._coll.update_one({"_id": REGISTER_ID}, {"$set": {"v": value}}),
        )
        outcome, detail = ("ok", {}) if error is None else classify(error)
        self.record("write", self._served.last, t_start, outcome, {"value": value, **detail})

    def close(self) -> None:
        self._client.close()


class RegisterReader(Probe):
    """Reads the register every interval: majority read concern, one causal session."""

    name = "register"

    def __init__(self, history: History, clock: RunClock, *, uri: str, collection: str,
                 interval_s: float, timeout_s: float) -> None:  # fmt: skip
        super().__init__(history, clock, interval_s)
        self._served = ServedBy()
        self._client = probe_client(uri, timeout_s, retry_writes=False, retry_reads=False,
                                    listener=self._served)  # fmt: skip
        self._coll = self._client[PROBE_DB].get_collection(
            collection, read_concern=ReadConcern("majority"),
            read_preference=ReadPreference.PRIMARY,
        )  # fmt: skip
        self._session = self._client.start_session(causal_consistency=True)

    def tick(self) -> None:
        self._served.reset()
        found: dict[str, Any] = {}

        def read() -> None:
            doc = self._coll.find_one({"_id": REGISTER_ID}, session=self._session)
            found["value"] = None if doc is None else doc.get("v")

        t_start, _, error = timed(self.clock, read)
        if error is None:
            self.record("read", self._served.last, t_start, "ok", {"value": found["value"]})
        else:
            outcome, detail = classify(error)
            self.record("read", self._served.last, t_start, outcome, detail)

    def close(self) -> None:
        self._session.end_session()
        self._client.close()
