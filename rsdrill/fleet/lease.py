"""One experiment per cluster at a time: a lease in the fleet's store, taken before the
preflight, renewed while the run lives, released at its end. A second run finds it held and
waits, or is refused naming the holder. A holder that crashed stops renewing: its lease
expires after its TTL, or at once when it was on this machine and its process is gone. A lease
not signed with the fleet key is no lease (anyone able to write to the store could write one)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import secrets
import socket
import threading
import time
from typing import Any

from rsdrill.errors import GuardRefusal
from rsdrill.fleet.signing import genuine, signed
from rsdrill.fleet.store import FleetStore, FleetStoreError

TTL_S = 30.0
RENEW_EVERY_S = TTL_S / 3


class LeaseHeld(GuardRefusal):
    """Another run holds the cluster's lease."""


def describe(record: dict[str, Any]) -> str:
    return (f"experiment {record.get('experiment')!r} on {record.get('host')} (pid "
            f"{record.get('pid')}), started at {record.get('started_at')}")  # fmt: skip


def _pid_gone(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class ClusterLease:
    def __init__(self, store: FleetStore, key: bytes | None, cluster: str, experiment: str,
                 ttl_s: float = TTL_S) -> None:  # fmt: skip
        self.store, self.key, self.cluster = store, key, cluster
        self.ttl_s = ttl_s
        self.record: dict[str, Any] = {
            "cluster": cluster,
            "token": secrets.token_hex(16),
            "experiment": experiment,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        self.lost: str | None = None  # why this run no longer holds it
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _stamped(self) -> dict[str, Any]:
        return signed({**self.record, "until": time.time() + self.ttl_s}, self.key)

    def _takeable(self, current: dict[str, Any]) -> bool:
        # Another cluster's genuine lease copied here is no lease of this one.
        if not genuine(current, self.key) or current.get("cluster") != self.cluster:
            return True
        until = current.get("until")
        if not isinstance(until, int | float) or until < time.time():
            return True
        return current.get("host") == socket.gethostname() and _pid_gone(current.get("pid"))

    def take(self, wait_s: float = 0.0) -> None:
        """Hold the lease (LeaseHeld when another run holds it for longer than `wait_s`)."""
        deadline = time.monotonic() + wait_s
        while True:
            current = self.store.lease(self.cluster)
            if current is None or self._takeable(current):
                stamped = self._stamped()
                if self.store.put_lease(self.cluster, stamped, replacing=current):
                    self.record = stamped
                    self._renewer = threading.Thread(target=self._renew, daemon=True,
                                                     name="rsdrill-lease")  # fmt: skip
                    self._renewer.start()
                    return
                continue  # another run took it in between: look again
            left = deadline - time.monotonic()
            if left <= 0:
                raise LeaseHeld("lease", f"cluster {self.cluster} is held by another run: "
                                f"{describe(current)}; its lease ends within {self.ttl_s:g} s "
                                "of its last renewal")  # fmt: skip
            time.sleep(min(left, 1.0))

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            stamped = self._stamped()
            try:
                if not self.store.put_lease(self.cluster, stamped, replacing=self.record):
                    self.lost = f"lost the lease of cluster {self.cluster} (taken by another run)"
                    return
            except FleetStoreError:
                continue  # the store is down for a moment: the lease lasts its TTL
            self.record = stamped

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
            with contextlib.suppress(FleetStoreError):  # else it expires by itself
                self.store.drop_lease(self.cluster, self.record["token"])
