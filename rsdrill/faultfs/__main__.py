"""`python -m rsdrill.faultfs serve SOURCE MOUNTPOINT --state-dir D [--mirror DIR]`: the
mount's daemon (with `--mirror`, SOURCE is replica a of a mirrored backing and DIR replica b).

Runs in the foreground until unmounted (or SIGTERM/SIGINT, which unmount). Started by
`mount.mount()`; not meant to be run by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path

from rsdrill.faultfs.binding import fuse_binding
from rsdrill.faultfs.compiled import LAYERS, CompiledDataPath, choose_layer, compiled_binary
from rsdrill.faultfs.control import ControlServer, socket_name
from rsdrill.faultfs.mirror import MIRROR_FILE, Backing
from rsdrill.faultfs.mount import (
    FSTYPE,
    MOUNT_TIMEOUT_S,
    STATE_FILE,
    FaultFSError,
    detach,
    is_mounted,
)
from rsdrill.faultfs.state import FaultState
from rsdrill.faultfs.undo import UndoLog

# After a lazy unmount the daemon keeps serving files still open; an owner that is gone waits
# this long for them to close before the daemon leaves anyway.
_ORPHAN_GRACE_S = 30.0


def _watch_owner(owner_pid: int, mountpoint: Path, mirror: Backing | None = None) -> None:
    """Unmount (lazily) when the owner process exits; leave for good a little later.

    A `mirror`ed mount stays: its member goes on writing through it, and once detached the
    files it opens next would be on copy a alone (the mount is over copy a's directory), out of
    b's sight, and a later resync of a from b would overwrite them. Its rules are cleared
    instead (the mirror masked them anyway) so that a failed copy resyncs now, online, and it
    serves until unmounted (`rsdrill recover`: the members stopped first, then the mounts)."""
    try:
        pidfd = os.pidfd_open(owner_pid)
    except ProcessLookupError:
        pidfd = None
    if pidfd is not None:
        select.select([pidfd], [], [])
    if mirror is not None:
        mirror.state.clear()
        mirror.rules_changed()
        print(f"owner {owner_pid} is gone: rules cleared, {mountpoint} served until unmounted",
              flush=True)  # fmt: skip
        return
    print(f"owner {owner_pid} is gone: unmounting {mountpoint}", flush=True)
    # An owner killed while the mount was still being set up: wait for it to exist first.
    deadline = time.monotonic() + MOUNT_TIMEOUT_S
    while not is_mounted(mountpoint) and time.monotonic() < deadline:
        time.sleep(0.05)
    detach(mountpoint)
    time.sleep(_ORPHAN_GRACE_S)
    os._exit(0)


def serve(args: argparse.Namespace) -> None:
    source, mountpoint = Path(args.source), Path(args.mountpoint)
    try:
        layer = choose_layer(args.layer, mirrored=args.mirror is not None)
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    if args.mirror is not None and (args.track_unsynced or args.passthrough):
        raise SystemExit("faultfs: a mirrored mount neither tracks unsynced writes nor passes "
                         "files through")  # fmt: skip
    if layer == "python" and args.layer is None and compiled_binary() is None:
        print("faultfs: the compiled data path is not built (no cargo at install): serving "
              "with the Python layer (slower)", flush=True)  # fmt: skip
    info = {"pid": os.getpid(), "source": str(source), "mountpoint": str(mountpoint),
            "track_unsynced": bool(args.track_unsynced), "layer": layer,
            "socket": socket_name(mountpoint).decode()[1:], "mirror": args.mirror}  # fmt: skip
    if args.mirror is not None:  # where the replicas' states are kept (recover reads it)
        info["mirror_record"] = str(Path(args.state_dir, MIRROR_FILE).resolve())
    if layer == "compiled":
        _serve_compiled(args, source, mountpoint, info)
    else:
        _serve_python(args, source, mountpoint, info)
    print(f"unmounted {mountpoint}", flush=True)


def _started(args: argparse.Namespace, mountpoint: Path, info: dict[str, object],
             mirror: Backing | None = None) -> None:  # fmt: skip
    """The mount is up: record it, watch its owner."""
    (Path(args.state_dir) / STATE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    if args.owner_pid:
        threading.Thread(target=_watch_owner, args=(args.owner_pid, mountpoint, mirror),
                         daemon=True, name="faultfs-owner").start()  # fmt: skip
    print(f"serving {args.source} on {mountpoint} ({info['layer']} layer)", flush=True)


def _serve_compiled(args: argparse.Namespace, source: Path, mountpoint: Path,
                    info: dict[str, object]) -> None:  # fmt: skip
    data_path = CompiledDataPath(source, mountpoint, track_unsynced=args.track_unsynced,
                                 passthrough=args.passthrough)  # fmt: skip
    info["passthrough"] = data_path.passthrough
    # SIGTERM/SIGINT: the data path unmounts (lazily) and exits once its open files close.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: data_path.process.send_signal(signal.SIGTERM))
    ControlServer(mountpoint, data_path, data_path if args.track_unsynced else None,
                  info).start()  # fmt: skip
    _started(args, mountpoint, info)
    status = data_path.process.wait()
    if status != 0:
        raise RuntimeError(f"the compiled data path exited with status {status}")


def _serve_python(args: argparse.Namespace, source: Path, mountpoint: Path,
                  info: dict[str, object]) -> None:  # fmt: skip
    try:
        mfusepy = fuse_binding()
    except FaultFSError as exc:  # the log's last line, which mount() shows
        raise SystemExit(str(exc)) from exc
    from rsdrill.faultfs.operations import FaultOperations

    # Opened before mounting: the backing directory stays reachable under the mount.
    root_fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY)
    state = FaultState()
    if args.mirror is None:
        backing = Backing({None: root_fd}, {None: str(source)}, state)
    else:
        mirror_fd = os.open(args.mirror, os.O_RDONLY | os.O_DIRECTORY)
        backing = Backing({"a": root_fd, "b": mirror_fd},
                          {"a": str(source), "b": os.path.abspath(args.mirror)}, state,
                          Path(str(info["mirror_record"])))  # fmt: skip
    undo = UndoLog(root_fd) if args.track_unsynced else None
    ControlServer(mountpoint, state, undo, info, backing).start()
    _started(args, mountpoint, info, backing if backing.mirrored else None)
    mfusepy.FUSE(
        FaultOperations(backing, state, undo),
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rsdrill.faultfs")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="mount SOURCE on MOUNTPOINT and serve it")
    run.add_argument("source")
    run.add_argument("mountpoint")
    run.add_argument("--state-dir", required=True)
    run.add_argument("--owner-pid", type=int)
    run.add_argument("--layer", choices=LAYERS, help="compiled (default where built) or python")
    run.add_argument(
        "--mirror",
        metavar="DIR",
        help="mirror the backing: SOURCE is replica a, DIR replica b (Python layer only)",
    )
    run.add_argument(
        "--passthrough",
        action="store_true",
        help="compiled layer: files opened while no rule is set bypass the daemon (see docs)",
    )
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
