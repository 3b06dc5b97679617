"""Which of two replica-set configs is newer: MongoDB 4.4+ orders them by (term, version), and by
version alone when either is a forced config (term -1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson.int64 import Int64

FORCED_TERM = -1


@dataclass(frozen=True, order=False)
class ConfigId:
    version: int
    term: int

    def newer_than(self, other: ConfigId) -> bool:
        if FORCED_TERM in (self.term, other.term):
            return self.version > other.version
        return (self.term, self.version) > (other.term, other.version)

    def document(self) -> dict[str, Any]:
        return {"configVersion": self.version, "configTerm": Int64(self.term)}

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> ConfigId | None:
        """From a heartbeat or vote request; None from a sender that did not say."""
        if "configVersion" not in doc:
            return None
        return cls(int(doc["configVersion"]), int(doc.get("configTerm", FORCED_TERM)))
