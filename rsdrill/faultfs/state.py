"""The live fault state of one mount: the active rules, their rate buckets, and counters.

Every filesystem operation passes through `admit()` before it touches the backing directory:
it fails with the rule's errno, sleeps for added latency, or waits for its rate bucket. Waits
end early when the rules change, so clearing a throttle or a detach releases every queued
operation at once: nothing blocks longer than the rules in force say it should.
"""

from __future__ import annotations

import errno
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rsdrill.faultfs.bucket import TokenBucket, bytes_bucket, ops_bucket
from rsdrill.faultfs.rules import Rule

_DATA_OPERATIONS = ("read", "write")


@dataclass(frozen=True)
class _Cap:
    bucket: TokenBucket
    per_byte: bool  # True: costs the transfer's bytes; False: one token per operation

    def reserve(self, nbytes: int) -> float:
        return self.bucket.reserve(float(max(nbytes, 1)) if self.per_byte else 1.0)


@dataclass
class _Active:
    rule: Rule
    caps: dict[str, list[_Cap]] = field(default_factory=dict)
    # What this rule did: operations it matched, failed, slowed (latency or a rate cap).
    hits: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, rule: Rule) -> _Active:
        caps: dict[str, list[_Cap]] = {"read": [], "write": []}
        # A shared cap is one bucket both directions draw from.
        for rate, per_byte, directions in (
            (rule.iops, False, ("read", "write")),
            (rule.bytes_per_s, True, ("read", "write")),
            (rule.read_iops, False, ("read",)),
            (rule.write_iops, False, ("write",)),
            (rule.read_bytes_per_s, True, ("read",)),
            (rule.write_bytes_per_s, True, ("write",)),
        ):
            if rate:
                cap = _Cap(bytes_bucket(rate) if per_byte else ops_bucket(rate), per_byte)
                for direction in directions:
                    caps[direction].append(cap)
        return cls(rule, caps)


class FaultState:
    """Rules by name, applied to each operation; thread-safe (FUSE calls come from many threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: dict[str, _Active] = {}
        self._changed = threading.Event()
        self.counters: Counter[str] = Counter()

    # -- control -----------------------------------------------------------------------------

    def set_rule(self, name: str, rule: Rule) -> None:
        with self._lock:
            self._rules[name] = _Active.of(rule)
            self._wake()

    def clear(self, name: str | None = None) -> dict[str, dict[str, int]]:
        """Drop one rule (or all): each dropped rule's hits, counted up to its last operation
        (a status read before the clear would miss those in between)."""
        with self._lock:
            names = list(self._rules) if name is None else [n for n in (name,) if n in self._rules]
            dropped = {n: dict(self._rules.pop(n).hits) for n in names}
            self._wake()
        return dropped

    def replicas_named(self) -> set[str]:
        """The mirror's replicas some rule acts on."""
        with self._lock:
            return {a.rule.replica for a in self._rules.values() if a.rule.replica is not None}

    def rules(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {name: active.rule.to_dict() for name, active in self._rules.items()}

    @property
    def detached(self) -> bool:
        with self._lock:
            return any(a.rule.detach for a in self._rules.values() if a.rule.replica is None)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = threading.Event()

    # -- the data path -----------------------------------------------------------------------

    def admit(self, operation: str, path: str, nbytes: int = 0,
              replica: str | None = None) -> int | None:  # fmt: skip
        """Apply the rules to one operation: the errno to fail it with, or None to go ahead.

        `replica`: the operation on that backing replica of a mirrored mount, which only the
        rules naming it act on (None: the mount's own operation, which only the others do).
        Sleeps first for latency and rate caps (outside the lock).
        """
        with self._lock:
            actives = [a for a in self._rules.values() if a.rule.replica == replica]
            changed = self._changed
            if replica is None:
                self.counters[operation] += 1
        if not actives:
            return None
        latency = queued = 0.0
        failure: int | None = None
        for active in actives:
            rule = active.rule
            if rule.detach:
                self._count("detached", active, "failed")
                return errno.EIO  # the volume is gone: fail at once
            matched, failed, delay = rule.applies_to(operation, path), False, 0.0
            if matched:
                delay = rule.latency_s
                latency += delay
                failed = rule.errno is not None and random.random() < rule.probability
                if failed and failure is None:
                    failure = rule.errno_value
            if operation in _DATA_OPERATIONS and active.caps[operation]:
                # Rate caps hold for the whole volume, whatever the rule's operations or path.
                wait = max(cap.reserve(nbytes) for cap in active.caps[operation])
                queued = max(queued, wait)
                delay += wait
            with self._lock:
                active.hits.update(matched=int(matched), failed=int(failed), slowed=int(delay > 0))
        wait = latency + queued
        if wait > 0:
            self._count("delayed" if replica is None else f"replica_{replica}_delayed")
            # Ends early when the rules change (a revert must not wait out a queue).
            changed.wait(wait)
            if self.detached:
                return errno.EIO
        if failure is not None:
            where = "" if replica is None else f"replica_{replica}_"
            self._count(f"{where}failed_{operation}")
        return failure

    def _count(self, name: str, active: _Active | None = None, hit: str = "") -> None:
        with self._lock:
            self.counters[name] += 1
            if active is not None:
                active.hits[hit] += 1

    def snapshot(self) -> dict[str, Any]:
        rules = self.rules()
        with self._lock:
            hits = {name: dict(a.hits) for name, a in self._rules.items()}
            return {"rules": rules, "rule_hits": hits, "counters": dict(self.counters)}
