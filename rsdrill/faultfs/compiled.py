"""The compiled data path (`faultfs-rs/`, Rust): where its binary is, and the proxy through
which the daemon's control server reaches the rules, counters and undo records living in it.

The Python daemon stays the mount's process (its control socket, SO_PEERCRED check and rule
validation are unchanged); with the compiled layer it starts `rsdrill-faultfs` as a child that
mounts and serves the files, and forwards each validated request to it as a JSON line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from rsdrill.faultfs.rules import Rule

BINARY = "rsdrill-faultfs"
# `RSDRILL_FAULTFS_LAYER=python` keeps a mount on the Python layer even where the compiled one
# is built (benches compare the two; a suspected bug in one can be ruled out).
LAYER_ENV = "RSDRILL_FAULTFS_LAYER"
LAYERS = ("compiled", "python")
# `RSDRILL_FAULTFS_BINARY=PATH` names the compiled data path to use; set empty, none is built
# (what a machine without cargo sees).
BINARY_ENV = "RSDRILL_FAULTFS_BINARY"
_REPO_BUILD = Path(__file__).resolve().parents[2] / "faultfs-rs" / "target" / "release" / BINARY


def compiled_binary() -> Path | None:
    """The built data path: as `RSDRILL_FAULTFS_BINARY` says, else next to this module (pip
    install), else the crate's release build in a checkout (.ci/install-faultfs), else on PATH;
    None when none was built."""
    override = os.environ.get(BINARY_ENV)
    if override is not None:
        return Path(override) if override and os.access(override, os.X_OK) else None
    for candidate in (Path(__file__).with_name(BINARY), _REPO_BUILD):
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(BINARY)
    return Path(found) if found else None


def choose_layer(requested: str | None = None, *, mirrored: bool = False) -> str:
    """`compiled` or `python`: the one asked for (argument, then the environment), else the
    compiled layer where it is built. Asking for the compiled one where it is not built fails,
    and so does asking for it with a mirrored backing, which only the Python layer serves."""
    layer = requested or os.environ.get(LAYER_ENV) or None
    if layer is not None and layer not in LAYERS:
        raise ValueError(f"faultfs layer {layer!r}: choose from {', '.join(LAYERS)}")
    if layer == "compiled" and mirrored:
        raise ValueError(
            "faultfs: the compiled layer has one backing directory; a mirrored mount is "
            "served by the Python layer (drop the compiled layer)"
        )
    if layer == "compiled" and compiled_binary() is None:
        raise ValueError("faultfs: the compiled layer is not built (needs cargo at install)")
    if mirrored:
        return "python"
    return layer or ("compiled" if compiled_binary() is not None else "python")


class CompiledDataPath:
    """The child process serving the mount, seen as the rule store and undo log the control
    server expects (`FaultState` and `UndoLog`'s control-side methods)."""

    def __init__(self, source: Path, mountpoint: Path, *, track_unsynced: bool,
                 passthrough: bool) -> None:  # fmt: skip
        binary = compiled_binary()
        if binary is None:
            raise RuntimeError("the compiled faultfs layer is not built")
        argv = [str(binary), str(source), str(mountpoint)]
        argv += ["--track-unsynced"] * track_unsynced + ["--passthrough"] * passthrough
        # stderr stays the daemon's (its log file).
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._lock = threading.Lock()
        ready = self._read_line()
        if ready is None:
            raise RuntimeError(f"{binary} exited with status {self.process.wait()}")
        self.passthrough = bool(ready.get("passthrough"))

    def _read_line(self) -> dict[str, Any] | None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        return dict(json.loads(line)) if line else None

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """One request to the data path; its reply (OSError if it is gone, ValueError if it
        refused)."""
        assert self.process.stdin is not None
        with self._lock:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
            reply = self._read_line()
        if reply is None:
            raise OSError("the faultfs data path has exited")
        if not reply.pop("ok", False):
            raise ValueError(str(reply.get("error", "refused")))
        return reply

    # -- as FaultState -----------------------------------------------------------------------

    def set_rule(self, name: str, rule: Rule) -> None:
        self.call({"op": "set", "name": name, "rule": rule.to_dict(), "errno": rule.errno_value})

    def clear(self, name: str | None = None) -> dict[str, dict[str, int]]:
        return dict(self.call({"op": "clear", "name": name})["rule_hits"])

    def rules(self) -> dict[str, dict[str, Any]]:
        return dict(self.snapshot()["rules"])

    def snapshot(self) -> dict[str, Any]:
        status = self.call({"op": "status"})
        status.pop("unsynced", None)
        return status

    # -- as UndoLog ----------------------------------------------------------------------------

    def pending(self) -> dict[str, int]:
        return dict(self.call({"op": "status"})["unsynced"] or {})

    def power_loss(self) -> dict[str, int]:
        return dict(self.call({"op": "power-loss"})["undone"])
