"""`python -m rsdrill.faultfs serve SOURCE MOUNTPOINT --state-dir D`: the mount's daemon.

Runs in the foreground until unmounted (or SIGTERM/SIGINT, which unmount). Started by
`mount.mount()`; not meant to be run by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import threading
import time
from pathlib import Path

from rsdrill.faultfs.control import ControlServer, socket_name
from rsdrill.faultfs.mount import FSTYPE, MOUNT_TIMEOUT_S, STATE_FILE, detach, is_mounted
from rsdrill.faultfs.state import FaultState
from rsdrill.faultfs.undo import UndoLog

# After a lazy unmount the daemon keeps serving files still open; an owner that is gone waits
# this long for them to close before the daemon leaves anyway.
_ORPHAN_GRACE_S = 30.0


def _watch_owner(owner_pid: int, mountpoint: Path) -> None:
    """Unmount (lazily) when the owner process exits; leave for good a little later."""
    try:
        pidfd = os.pidfd_open(owner_pid)
    except ProcessLookupError:
        pidfd = None
    if pidfd is not None:
        select.select([pidfd], [], [])
    print(f"owner {owner_pid} is gone: unmounting {mountpoint}", flush=True)
    # An owner killed while the mount was still being set up: wait for it to exist first.
    deadline = time.monotonic() + MOUNT_TIMEOUT_S
    while not is_mounted(mountpoint) and time.monotonic() < deadline:
        time.sleep(0.05)
    detach(mountpoint)
    time.sleep(_ORPHAN_GRACE_S)
    os._exit(0)


def serve(args: argparse.Namespace) -> None:
    try:
        import mfusepy

        from rsdrill.faultfs.operations import FaultOperations
    except (ImportError, OSError) as exc:  # mfusepy raises OSError when libfuse is missing
        raise SystemExit(
            f"faultfs: {exc}: needs libfuse3 and fusermount3 (apt-get install fuse3) and the "
            "mfusepy package (pip install mfusepy); .ci/install-faultfs installs both"
        ) from exc

    source, mountpoint = Path(args.source), Path(args.mountpoint)
    # Opened before mounting: the backing directory stays reachable under the mount.
    root_fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY)
    state = FaultState()
    undo = UndoLog(root_fd) if args.track_unsynced else None
    info = {"pid": os.getpid(), "source": str(source), "mountpoint": str(mountpoint),
            "track_unsynced": bool(args.track_unsynced),
            "socket": socket_name(mountpoint).decode()[1:]}  # fmt: skip
    ControlServer(mountpoint, state, undo, info).start()
    state_dir = Path(args.state_dir)
    (state_dir / STATE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    if args.owner_pid:
        threading.Thread(target=_watch_owner, args=(args.owner_pid, mountpoint), daemon=True,
                         name="faultfs-owner").start()  # fmt: skip
    print(f"serving {source} on {mountpoint}", flush=True)
    mfusepy.FUSE(
        FaultOperations(root_fd, state, undo),
        str(mountpoint),
        foreground=True,
        fsname=FSTYPE.removeprefix("fuse."),
        subtype=FSTYPE.removeprefix("fuse."),
        allow_other=True,
        # No attribute or name caching: after a power loss the files' sizes changed under the
        # kernel, and every open re-reads the pages (no keep_cache) for the same reason.
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
        hard_remove=True,
    )
    print(f"unmounted {mountpoint}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rsdrill.faultfs")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="mount SOURCE on MOUNTPOINT and serve it")
    run.add_argument("source")
    run.add_argument("mountpoint")
    run.add_argument("--state-dir", required=True)
    run.add_argument("--owner-pid", type=int)
    run.add_argument(
        "--track-unsynced",
        action="store_true",
        help="keep undo records so that a power loss can drop unsynced writes",
    )
    args = parser.parse_args(argv)
    try:
        serve(args)
    except (OSError, RuntimeError) as exc:
        print(f"faultfs: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
