"""A multi-document transaction as a router runs it, as mongos's TransactionRouter does: the
shards it reached (its participants, in the order reached; the first coordinates its commit),
the fields each participant's first statement must carry, and one read timestamp for all of
them under snapshot read concern (so that every shard reads the same moment)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bson.int64 import Int64
from bson.timestamp import Timestamp

# What only a participant's first statement carries.
_OPENING = ("startTransaction", "readConcern")
SNAPSHOT_RETRIES = 10
"""How often a first statement is run again at a later cluster time (mongos's limit)."""


@dataclass
class RoutedTransaction:
    participants: list[str] = field(default_factory=list)
    # None: another router started it (this one forwards its statements as they come).
    read_concern: dict[str, Any] | None = None
    # The read timestamp is the router's choice (not the client's): it may choose again.
    chose_time: bool = False
    # How often the transaction was started again on its shards (their txnRetryCounter).
    retries: int = 0

    @classmethod
    def begun(cls, body: dict[str, Any], cluster_time: Timestamp | None) -> RoutedTransaction:
        """From a statement: a transaction started by it, or one this router did not see
        start."""
        if not body.get("startTransaction"):
            return cls()
        concern = dict(body.get("readConcern") or {})
        if concern.get("level") == "snapshot" and "atClusterTime" not in concern:
            # As mongos: the newest cluster time it knows, at least the client's own.
            after = concern.pop("afterClusterTime", None)
            times = [t for t in (cluster_time, after) if isinstance(t, Timestamp)]
            if times:
                concern["atClusterTime"] = max(times)
                return cls(read_concern=concern, chose_time=True)
        return cls(read_concern=concern)

    @property
    def coordinator(self) -> str | None:
        return self.participants[0] if self.participants else None

    def statement_for(self, shard: str, body: dict[str, Any]) -> dict[str, Any]:
        """The statement as `shard` must see it: the first one it gets starts its part of the
        transaction, later ones continue it."""
        if self.read_concern is None:
            if shard not in self.participants:
                self.participants.append(shard)
            return body
        sent = {k: v for k, v in body.items() if k not in _OPENING}
        if shard not in self.participants:
            self.participants.append(shard)
            sent["startTransaction"] = True
            if self.read_concern:
                sent["readConcern"] = self.read_concern
            if self.retries:
                sent["txnRetryCounter"] = Int64(self.retries)
        return sent

    def may_start_again(self, shard: str) -> bool:
        """As mongos: a snapshot too old for the shard that ran the transaction's first
        statement (the only one reached) is no error of the client's; the transaction starts
        again at a later read timestamp."""
        first = self.participants == [shard]
        return self.chose_time and first and self.retries < SNAPSHOT_RETRIES

    def start_again(self, at: Timestamp) -> None:
        assert self.read_concern is not None
        self.read_concern["atClusterTime"] = at
        self.participants.clear()
        self.retries += 1
