"""Fault rules: what the fault-injecting filesystem does to the operations that match them.

A rule is plain data, sent over the control socket as JSON and kept by name in the daemon, so
several faults can be active on one mount at once (an error rule and a throttle, say).
"""

from __future__ import annotations

import errno as errno_module
import fnmatch
from dataclasses import dataclass, fields
from typing import Any

# Operations a rule can name. `read`/`write` are data transfers, `fsync` covers fsync and
# fdatasync, `open` covers open and create; metadata operations are never faulted (except by
# `detach`, which fails everything).
OPERATIONS = ("read", "write", "fsync", "open")
# The backing replicas of a mirrored mount (`mirror.py`) a rule can name.
REPLICAS = ("a", "b")


class RuleError(ValueError):
    """A rule that cannot be applied, with a message naming the field."""


def errno_number(name: str) -> int:
    """The errno value for a name such as "EIO" or "ENOSPC"."""
    value = getattr(errno_module, name.upper(), None)
    if not isinstance(value, int) or not name.upper().startswith("E"):
        raise RuleError(f"errno: unknown error name {name!r} (e.g. EIO, ENOSPC, EROFS)")
    return value


@dataclass(frozen=True)
class Rule:
    """One fault: errors, added latency, rate caps, or a detached volume.

    `path` is a glob matched against the path relative to the mount's root (`journal/*`);
    None matches every file. Rates are per second; None means no cap. `iops` and
    `bytes_per_s` cap reads and writes together, the `read_`/`write_` ones each direction.
    `replica` (a mirrored mount only): the rule acts on that backing replica's operations, not
    on the mount's, so the mount masks it while the other replica is in sync.
    """

    errno: str | None = None
    operations: tuple[str, ...] = ("write", "fsync")
    probability: float = 1.0
    path: str | None = None
    latency_s: float = 0.0
    iops: float | None = None
    read_iops: float | None = None
    write_iops: float | None = None
    bytes_per_s: float | None = None
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None
    detach: bool = False
    replica: str | None = None

    def __post_init__(self) -> None:
        if self.errno is not None:
            errno_number(self.errno)
        unknown = [op for op in self.operations if op not in (*OPERATIONS, "any")]
        if unknown:
            choices = ", ".join((*OPERATIONS, "any"))
            raise RuleError(f"operations: unknown {', '.join(unknown)} (choose from {choices})")
        if not 0 < self.probability <= 1:
            raise RuleError("probability: must be > 0 and <= 1")
        if self.latency_s < 0:
            raise RuleError("latency_s: must not be negative")
        for name in ("iops", "read_iops", "write_iops", "bytes_per_s", "read_bytes_per_s",
                     "write_bytes_per_s"):  # fmt: skip
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise RuleError(f"{name}: must be positive")
        if self.replica is not None and self.replica not in REPLICAS:
            raise RuleError(f"replica: {self.replica!r} is not one of {', '.join(REPLICAS)}")
        if self.replica is not None and self.detach:
            raise RuleError("replica: a replica's rule fails or slows its data operations; "
                            "detach acts on the whole mount")  # fmt: skip

    @property
    def errno_value(self) -> int | None:
        return None if self.errno is None else errno_number(self.errno)

    def applies_to(self, operation: str, path: str) -> bool:
        """True when `operation` on `path` (relative to the root) is one this rule targets."""
        if "any" not in self.operations and operation not in self.operations:
            return False
        return self.covers(path)

    def covers(self, path: str) -> bool:
        """True when `path` (relative to the root) is one of the files this rule targets."""
        return self.path is None or fnmatch.fnmatchcase(path, self.path)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Rule:
        known = {f.name for f in fields(cls)}
        extra = sorted(set(raw) - known)
        if extra:
            raise RuleError(f"unknown rule field(s): {', '.join(extra)}")
        values = dict(raw)
        if "operations" in values:
            values["operations"] = tuple(values["operations"])
        try:
            return cls(**values)
        except TypeError as exc:
            raise RuleError(str(exc)) from exc
