"""Sandbox members' data directories on faultfs, for runs with storage faults.

Each member's `data/` is mounted over itself before the member starts (so the member sees its
usual path) and unmounted after it stopped. Mirrored (`target.sandbox.mirror`), `data/` is
replica a of the member's data and `data-b/` next to it replica b. The run's own process owns
the mounts: should it die, each mount's daemon unmounts itself, and `rsdrill recover` (action
`sandbox-down`) clears whatever is left.
"""

from __future__ import annotations

import os
from pathlib import Path

from rsdrill.faultfs.mount import FaultFSError, faultfs_mounts, mount, unmount_all
from rsdrill.platforms.base import TargetError
from rsdrill.sandbox.config import MemberSpec, ReplSetSpec, member_dir

MIRROR_DIR = "data-b"


class MemberVolumes:
    """The faultfs mounts of one sandbox's members."""

    def __init__(self, directory: Path, spec: ReplSetSpec, *, track_unsynced: bool,
                 mirror: bool = False) -> None:  # fmt: skip
        self.directory = Path(os.path.abspath(directory))
        self.spec = spec
        self.track_unsynced = track_unsynced
        self.mirror = mirror

    def data_dir(self, member: MemberSpec) -> Path:
        return member_dir(self.directory, member) / "data"

    def replica_dirs(self, member: MemberSpec) -> tuple[Path, ...]:
        """The member's backing directories: `data/`, and `data-b/` when mirrored."""
        data = self.data_dir(member)
        return (data, data.with_name(MIRROR_DIR)) if self.mirror else (data,)

    def mount_all(self) -> None:
        """Mount every member's data directory (created empty if missing)."""
        try:
            for member in self.spec.members:
                data, *mirror = self.replica_dirs(member)
                for path in (data, *mirror):
                    path.mkdir(parents=True, exist_ok=True)
                mount(data, data, member_dir(self.directory, member), owner_pid=os.getpid(),
                      track_unsynced=self.track_unsynced,
                      mirror=mirror[0] if mirror else None)  # fmt: skip
        except FaultFSError as exc:
            self.unmount_all()
            raise TargetError(str(exc)) from exc

    def unmount_all(self) -> None:
        try:
            unmount_all(self.directory)
        except FaultFSError as exc:
            raise TargetError(str(exc)) from exc

    def mountpoint(self, host: str) -> Path | None:
        """The member's mounted data directory, or None when it is not on faultfs."""
        data = self.data_dir(self.spec.member(host))
        return data if data in faultfs_mounts(self.directory) else None
