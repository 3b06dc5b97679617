"""libfaketime for local members: the wall clock of a member process moved without a restart.

A member started with libfaketime preloaded reads its clock offset from a file of rsdrill's,
at most a second old (`FAKETIME_CACHE_DURATION=1`): a change lands within about 2 s, which
the fault's verification (the member's own hello) waits for and records. Re-reading the file
on every read (`FAKETIME_NO_CACHE`) would land it at once, but costs each wall-clock read a
file read (about 5 µs against 0.3 µs: bench/faketime_cost.py), and emulated members under it
stalled long enough to lose elections.

Only CLOCK_REALTIME moves (`FAKETIME_DONT_FAKE_MONOTONIC`): elections, heartbeats and timeouts
run on the monotonic clock, as after an NTP step. libfaketime's "monotonic fix" (on by default in
0.9.10 for this glibc) rewrites the deadline of a pthread_cond_timedwait on a monotonic condition
variable as if that clock were faked too; with it left alone the deadline lands in the past and
the wait ends at once (0.00 ms of 5 ms in bench/faketime_cost.py), so a member would spin in its
timed waits (Python's GIL hand-off is one). `FAKETIME_FORCE_MONOTONIC_FIX=0` turns the rewrite
off: the wait takes its 5 ms again.

Its rate option (`x1.5`) is not used: libfaketime counts it from the process's start, not from
the injection, and keeps it after the file says `+0`, so a drift could neither start at the
fault nor be set right without a restart.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# Where Debian, other distributions and `make install` put it.
_LIBRARY_GLOBS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
INSTALL_HINT = "apt-get install libfaketime"
# libfaketime (0.9.10) shares its state through a semaphore and a shared-memory object named
# after the process that loaded it first, and removes them only when that image exits: a
# member killed, or one that a shell exec'd into (a booting host), leaves them in /dev/shm.
_SHARED_NAMES = ("/dev/shm/faketime_shm_{pid}", "/dev/shm/sem.faketime_sem_{pid}")


def library() -> Path | None:
    """This machine's libfaketime.so.1 (None: not installed)."""
    for pattern in _LIBRARY_GLOBS:
        found = sorted(Path("/").glob(pattern.lstrip("/")))
        if found:
            return found[0]
    return None


def preload_env(offset_file: Path, lib: Path, base: dict[str, str]) -> dict[str, str]:
    """`base` with libfaketime preloaded, reading its offset from `offset_file`."""
    preload = " ".join(p for p in (str(lib), base.get("LD_PRELOAD", "")) if p)
    return {
        **base,
        "LD_PRELOAD": preload,
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_CACHE_DURATION": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # The monotonic clock is not faked, so its timed waits must not be rewritten either.
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
    }


def offset_file_of(pid: int) -> Path | None:
    """The offset file a running process was started with (None: not under libfaketime)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    values = dict(e.split(b"=", 1) for e in environ if b"=" in e)
    if b"faketime" not in values.get(b"LD_PRELOAD", b""):
        return None
    name = values.get(b"FAKETIME_TIMESTAMP_FILE")
    return Path(os.fsdecode(name)) if name else None


def set_offset(offset_file: Path, offset_s: float) -> None:
    """Move the clocks reading `offset_file` to real time + `offset_s` (atomically: a reader
    never sees a half-written file, which would read as no offset)."""
    offset_file.parent.mkdir(parents=True, exist_ok=True)
    scratch = offset_file.with_name(offset_file.name + ".new")
    scratch.write_text(f"{offset_s:+.3f}\n")
    os.replace(scratch, offset_file)


def reset(action: dict[str, object]) -> str:
    """Revert action `faketime-reset`: the member's clock back to real time (its offset file
    says +0; a member restarted meanwhile reads the same file)."""
    offset_file = Path(str(action["file"]))
    with contextlib.suppress(FileNotFoundError):
        if float(offset_file.read_text() or 0) == 0:
            return f"{action['host']}: clock already real time"
    set_offset(offset_file, 0.0)
    return f"{action['host']}: clock back to real time ({offset_file} +0)"


def release(pid: int) -> None:
    """Remove what libfaketime shared for `pid`, a member process that is gone."""
    for name in _SHARED_NAMES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name.format(pid=pid))
