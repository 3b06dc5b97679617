"""The history: every probe attempt, as it happened, and the faults' timeline.

Probes only append here; analyzers only read. Times are seconds since the run started, on the
monotonic clock (`RunClock`), so they compare across threads and with the sandbox's ground truth.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rsdrill.redact import redact_uri


@dataclass(frozen=True)
class RunClock:
    """The run's origin on both clocks; converts either to seconds since the start."""

    mono0: float
    wall0: float

    @classmethod
    def start(cls) -> RunClock:
        return cls(time.monotonic(), time.time())

    def now(self) -> float:
        return time.monotonic() - self.mono0

    def from_mono(self, mono: float) -> float:
        return mono - self.mono0

    def from_wall(self, wall: float) -> float:
        return wall - self.wall0


CHECK_PREFIX = "check:"
"""The samples of the user's check `<name>` (`probes.checks`) are ops of probe `check:<name>`."""
STALL_PROBE = "stall"
"""The probe of rsdrill's own process: its ops are the process's stalls, not requests sent."""
TXN_PROBE = "txn"
"""The transactions probe (probes/transactions.py), whose history analysis/elle.py checks."""
LEDGER_PROBE = "ledger"
"""The durability ledger's read-back (probes/durability.py): which acknowledged seqs are gone."""
CAUSAL_PROBE = "causal"
SHARD_WRITE_PREFIX = "shard-write:"


def shard_write_probe(shard: str) -> str:
    """The name of a sharded target's write probe of one shard (its ops' `probe`)."""
    return f"{SHARD_WRITE_PREFIX}{shard}"


"""The causal sessions probe (probes/causal.py), whose history analysis/causal.py checks."""


@dataclass(frozen=True, slots=True)
class Op:
    """One probe attempt.

    probe:   which probe ("write", "read", "ledger", "failover", "recovery", "lag", "load",
             "stall": rsdrill's own process woke up late)
    op:      what it did ("insert", "find", "hello", "status", "read", "update", ...)
    member:  host:port that answered, when known
    outcome: "ok", "error" or "timeout"
    detail:  what the analyzers need: {"seq": 7}, {"writable": true}, {"state": "PRIMARY"},
             {"lag_s": {...}}, {"error": "...", "code": 10107}
    """

    probe: str
    op: str
    member: str | None
    t_start: float
    t_end: float
    outcome: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@dataclass
class FaultRecord:
    """One fault as it was carried out."""

    index: int
    kind: str
    target: str
    injected_at_s: float | None = None
    verified_at_s: float | None = None
    reverted_at_s: float | None = None
    approximation: str | None = None
    """How the platform approximated the fault (its way in the kinds' spec), if it did."""
    detail: dict[str, Any] = field(default_factory=dict)
    applied_at_s: float | None = None
    """When the injection returned: the fault in force, its duration counted from here."""


class History:
    """Append-only, thread-safe list of probe attempts."""

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._lock = threading.Lock()

    def append(self, op: Op) -> None:
        with self._lock:
            self._ops.append(op)

    def ops(self, probe: str | None = None) -> list[Op]:
        """A snapshot, in the order attempts ended; optionally one probe's only."""
        with self._lock:
            ops = list(self._ops)
        return [o for o in ops if probe is None or o.probe == probe]

    def since(self, start: int) -> list[Op]:
        """The ops appended from the `start`th on: what a live view has not seen yet."""
        with self._lock:
            return self._ops[start:]

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops())

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)

    def write_jsonl(self, path: Path) -> None:
        with path.open("w") as f:
            for op in self.ops():
                # A driver error may quote the URI it was given: its password is masked.
                f.write(redact_uri(json.dumps(asdict(op), default=str)) + "\n")

    @classmethod
    def read_jsonl(cls, path: Path) -> History:
        """A history as `write_jsonl` wrote it, for re-analysis."""
        with path.open() as lines:
            return cls.from_ops(Op(**json.loads(line)) for line in lines)

    @classmethod
    def from_ops(cls, ops: Iterable[Op]) -> History:
        history = cls()
        for op in ops:
            history.append(op)
        return history
