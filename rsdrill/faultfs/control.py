"""The control channel: a Unix socket in the abstract namespace, named after the mount point.

One JSON object per line each way. Requests: `{"op": "ping"}`, `{"op": "set", "name": N,
"rule": {...}}` (see `rules.Rule`; the reply's `unreached` lists the rule's files open in
passthrough, which it misses until they are closed), `{"op": "clear"}` or `{"op": "clear",
"name": N}` (the reply's `rule_hits`: each dropped rule's hits to its last operation), `{"op":
"status"}` (with a mirrored backing, its replicas' states under `replicas`),
`{"op": "power-loss"}`. Replies carry `"ok": true` or `"ok": false,
"error": "..."`. An abstract socket needs no file (no path-length limit, nothing stale left
behind by a crashed daemon): it exists exactly while the daemon runs.

An abstract socket has no file permissions either: any local user can connect. So the daemon
asks the kernel who is calling (SO_PEERCRED) and serves only its own user and root; anyone else
could otherwise detach a member's volume or drop a real mongod's unsynced writes. Nor has the
name an owner: any local user can bind it first (before the daemon, or once it exited), so a
client asks who answers too, and believes only its own user and root.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsdrill.faultfs.compiled import CompiledDataPath
from rsdrill.faultfs.mirror import Backing
from rsdrill.faultfs.rules import Rule
from rsdrill.faultfs.state import FaultState
from rsdrill.faultfs.undo import UndoLog

CONTROL_TIMEOUT_S = 5.0
_MAX_REQUEST_BYTES = 1 << 20


class ControlError(Exception):
    """The daemon is not there, or refused the request (message says which)."""


def socket_name(mountpoint: Path | str) -> bytes:
    """The abstract socket address of the daemon serving `mountpoint`."""
    key = os.path.normpath(os.path.abspath(mountpoint)).encode()
    return b"\0rsdrill-faultfs/" + hashlib.sha256(key).hexdigest()[:32].encode()


def request(mountpoint: Path | str, message: dict[str, Any],
            timeout_s: float = CONTROL_TIMEOUT_S) -> dict[str, Any]:  # fmt: skip
    """Send one request to the daemon of `mountpoint`; its reply (raises ControlError)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(socket_name(mountpoint))
            server_uid = peer_uid(sock)
            if not _trusted(server_uid):
                raise ControlError(f"faultfs at {mountpoint}: refused: its socket is served by "
                                   f"uid {server_uid}, neither root nor this user "
                                   f"({os.geteuid()})")  # fmt: skip
            sock.sendall(json.dumps(message).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise ControlError(f"no faultfs daemon serves {mountpoint}") from exc
        except OSError as exc:
            raise ControlError(f"faultfs at {mountpoint}: {exc}") from exc
    try:
        reply = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ControlError(f"faultfs at {mountpoint}: no reply") from exc
    if not reply.get("ok"):
        raise ControlError(f"faultfs at {mountpoint}: {reply.get('error', 'refused')}")
    return dict(reply)


_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket, as the kernel says."""
    data = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    return int(_PEERCRED.unpack(data)[1])


def _trusted(uid: int) -> bool:
    """Whether a peer of `uid` may control a mount, or answer for one: root or this user."""
    return uid in (0, os.geteuid())


class ControlServer:
    """Serves the control requests of one mount from a background thread.

    `state` and `undo` are the Python layer's own, or the compiled data path standing in for
    both (the requests, validation and replies are the same either way). `backing`: the
    Python layer's, told when rules change (a mirror resyncs a replica no rule names any more).
    """

    def __init__(
        self,
        mountpoint: Path,
        state: FaultState | CompiledDataPath,
        undo: UndoLog | CompiledDataPath | None,
        info: dict[str, Any],
        backing: Backing | None = None,
    ) -> None:
        self.state = state
        self.undo = undo
        self.info = info
        self.backing = backing
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(socket_name(mountpoint))
        self._sock.listen(16)
        self._handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "ping": lambda _: dict(self.info),
            "set": self._set,
            "clear": self._clear,
            "status": self._status,
            "power-loss": self._power_loss,
        }

    def start(self) -> None:
        threading.Thread(target=self._accept_loop, name="faultfs-control", daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            conn, _ = self._sock.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(CONTROL_TIMEOUT_S)
            try:
                uid = peer_uid(conn)
                # Read the request even to refuse it: closing before the client has sent it
                # would fail its send (EPIPE) instead of telling it why.
                line = conn.makefile("rb").readline(_MAX_REQUEST_BYTES)
                if not _trusted(uid):
                    reply = {"ok": False, "error": f"refused: uid {uid} is neither root nor "
                             f"the faultfs daemon's user ({os.geteuid()})"}  # fmt: skip
                else:
                    reply = self.handle(json.loads(line))
            except (OSError, json.JSONDecodeError) as exc:
                reply = {"ok": False, "error": f"bad request: {exc}"}
            with contextlib.suppress(OSError):  # the client gave up: nothing to tell it
                conn.sendall(json.dumps(reply).encode() + b"\n")

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        handler = self._handlers.get(str(message.get("op")))
        if handler is None:
            return {"ok": False, "error": f"unknown op {message.get('op')!r}"}
        try:
            return {"ok": True, **handler(message)}
        except (ValueError, KeyError, TypeError, OSError) as exc:
            return {"ok": False, "error": str(exc)}

    def _set(self, message: dict[str, Any]) -> dict[str, Any]:
        rule = Rule.from_dict(dict(message["rule"]))
        if rule.replica is not None and (self.backing is None or not self.backing.mirrored):
            raise ValueError(
                f"replica {rule.replica}: this mount has one backing directory (replicas a "
                "and b are a mirrored mount's: serve --mirror DIR)"
            )
        self.state.set_rule(str(message["name"]), rule)
        # Files open in passthrough (compiled layer) stay outside the rule until closed: say
        # which of its files those are now, so a caller can refuse a rule that misses them.
        passed = self.state.snapshot().get("passthrough_open") or []
        return {"rules": self.state.rules(), "unreached": [p for p in passed if rule.covers(p)]}

    def _clear(self, message: dict[str, Any]) -> dict[str, Any]:
        hits = self.state.clear(message.get("name"))
        if self.backing is not None:
            self.backing.rules_changed()
        return {"cleared": list(hits), "rule_hits": hits}

    def _status(self, _: dict[str, Any]) -> dict[str, Any]:
        unsynced = self.undo.pending() if self.undo is not None else None
        status = {**self.info, **self.state.snapshot(), "unsynced": unsynced}
        if self.backing is not None and self.backing.mirrored:
            status["replicas"] = self.backing.snapshot()
        return status

    def _power_loss(self, _: dict[str, Any]) -> dict[str, Any]:
        if self.undo is None:
            raise ValueError("power loss needs a mount started with unsynced-write tracking")
        return {"undone": self.undo.power_loss()}
