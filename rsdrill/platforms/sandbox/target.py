"""`platform: sandbox`: a replica set rsdrill starts for the run and stops afterwards.

The sandbox lives in the run's output directory, so each member's ground-truth event log
(`sandbox/members/<port>/events.jsonl`) stays next to the result it can be checked against.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymongo import MongoClient, WriteConcern
from pymongo.errors import PyMongoError

from rsdrill.connection import ConnectOptions
from rsdrill.experiment.schema import Experiment, Fault, Target
from rsdrill.layout import member_count
from rsdrill.platforms.base import RunTarget, TargetError
from rsdrill.platforms.machine.disk_fill import mount_small_disk, unmount_small_disks
from rsdrill.platforms.machine.mirror import mirrored
from rsdrill.platforms.machine.options import needs_faultfs
from rsdrill.platforms.sandbox.hosts import SandboxHosts, free_port_base, settings_of
from rsdrill.platforms.sandbox.sharded import ShardedSandboxTarget
from rsdrill.platforms.sandbox.volumes import MemberVolumes
from rsdrill.sandbox.cluster import (
    Sandbox,
    SandboxError,
    choose_engine,
    set_uri,
    up,
)
from rsdrill.sandbox.config import build_topology, member_dir

PRELOAD_DB = "rsdrill_data"
_PRELOAD_DOC_BYTES = 1000


class SandboxTarget:
    platform = "sandbox"

    def __init__(self, config: Target, directory: Path, faults: Sequence[Fault] = ()) -> None:
        """`faults`: the experiment's; storage faults put the members' data on faultfs (and
        so does `target.sandbox.mirror`, mirrored)."""
        self.config = config
        self.topology = config.topology
        self.directory = directory.resolve()  # journaled: `recover` may run elsewhere
        count = member_count(config.topology)
        options: dict[str, Any] = {"storage": config.storage, "handshake": config.handshake,
                                   "tls": config.tls, "x509": config.auth == "x509"}  # fmt: skip
        if config.oplog_size_mb:
            options["oplog_size_bytes"] = config.oplog_size_mb * 1024 * 1024
        if config.initial_sync_mb_per_s:
            options["initial_sync_bytes_per_s"] = int(config.initial_sync_mb_per_s * 1024 * 1024)
        if config.cache_mb:
            options["cache_bytes"] = config.cache_mb * 1024 * 1024
        if config.journal_commit_interval is not None:
            options["journal_commit_interval_ms"] = round(config.journal_commit_interval * 1000)
        if config.zones:
            options["zones"] = config.zones
        if config.priorities:
            options["priorities"] = config.priorities
        self.spec = build_topology(
            config.topology,
            port_base=config.port_base or free_port_base(count),
            settings=settings_of(config),
            **options,
        )
        self.members = [m.host for m in self.spec.members]
        self.uri = set_uri(self.spec)
        # The sandbox's TLS and login are known once it is built (`setup`).
        self.connect_options = ConnectOptions.from_uri(self.uri)
        self._sandbox: Sandbox | None = None
        self.small_disks = any(f.kind == "disk-fill" for f in faults)
        on_faultfs, track_unsynced = needs_faultfs(faults)
        mirror = mirrored(config)
        self.volumes = (
            MemberVolumes(directory, self.spec, track_unsynced=track_unsynced, mirror=mirror)
            if on_faultfs or mirror
            else None
        )

    @property
    def hosts(self) -> SandboxHosts:
        if self._sandbox is None:
            raise TargetError("the sandbox is not up")
        return SandboxHosts(self._sandbox)

    def setup(self) -> None:
        try:
            engine, _ = choose_engine(self.config.engine)
            before_start = self.volumes.mount_all if self.volumes else None
            if self.small_disks:
                before_start = self._mount_small_disks
            scram = self.config.auth in (True, "scram")
            self._sandbox = up(self.directory, self.spec, engine, before_start, auth=scram)
        except SandboxError as exc:
            raise TargetError(f"sandbox: {exc}") from exc
        self.uri = self._sandbox.uri  # with the login, when the set requires one
        self.connect_options = ConnectOptions.from_uri(self.uri)
        if self.config.data_mb:
            self._preload(self.config.data_mb)

    def prepare(self) -> None:
        """Nothing: `setup` built the set as the run needs it."""

    def data_directory(self, host: str) -> Path:
        return member_dir(self.directory, self.spec.member(host)) / "data"

    def _preload(self, megabytes: int) -> None:
        # Bulk data, not a workload: no retryable-write bookkeeping on the members.
        client: MongoClient[dict[str, Any]] = MongoClient(
            self.uri, serverSelectionTimeoutMS=30_000, retryWrites=False
        )
        with client:
            coll = client[PRELOAD_DB].get_collection(
                "preload", write_concern=WriteConcern("majority")
            )
            # The last batch waits for every data-bearing member: a run starts on a set where
            # each member holds the data, not with a secondary still applying it (a fault on
            # that one would then time its catching up, which grows with the data).
            every = len(self.spec.data_bearing)
            last = coll.with_options(write_concern=WriteConcern(every, wtimeout=120_000))
            pad = "p" * _PRELOAD_DOC_BYTES
            total = megabytes * 1024 * 1024 // _PRELOAD_DOC_BYTES
            try:
                for first in range(0, total, 1000):
                    batch = [{"_id": i, "pad": pad} for i in range(first, min(first + 1000, total))]
                    (last if first + 1000 >= total else coll).insert_many(batch)
            except PyMongoError as exc:
                raise TargetError(f"sandbox: preloading {megabytes} MB: {exc}") from exc

    def teardown(self) -> None:
        if self._sandbox is not None and not self.config.keep:
            self._sandbox.down()
        if self.volumes is not None:  # storage faults refuse `keep`: the mounts are the run's
            self.volumes.unmount_all()
        if self.small_disks:
            unmount_small_disks(self.directory)
        if self._sandbox is None or self.config.keep:
            return
        if self.volumes is not None and self.volumes.mirror:
            return  # both copies of mirrored data kept whole: they can be compared after
        self._sandbox.drop_data_files()  # the events, logs and rollback files stay

    @property
    def keep(self) -> bool:
        return self.config.keep

    def _mount_small_disks(self) -> None:
        for member in self.spec.members:
            mount_small_disk(member_dir(self.directory, member) / "data")

    def small_disk(self, host: str) -> Path | None:
        """The member's data directory when it is a disk of its own (disk-fill)."""
        data = member_dir(self.directory, self.spec.member(host)) / "data"
        return data if self.small_disks else None

    def faultfs_mountpoint(self, host: str) -> Path | None:
        """The member's data directory if it is on faultfs (storage faults need it)."""
        return self.volumes.mountpoint(host) if self.volumes else None

    def recover_action(self) -> dict[str, object] | None:
        # Owed even when kept: a run that dies while building the sandbox leaves it half-built.
        return {"action": "sandbox-down", "dir": str(self.directory)}

    def events_path(self, host: str) -> Path:
        return member_dir(self.directory, self.spec.member(host)) / "events.jsonl"


def make_target(exp: Experiment, out_dir: Path) -> SandboxTarget | ShardedSandboxTarget:
    """The run's sandbox, built under `out_dir/sandbox` (on faultfs if its faults need it)."""
    if exp.target.topology == "sharded":
        return ShardedSandboxTarget(exp.target, out_dir / "sandbox")
    return SandboxTarget(exp.target, out_dir / "sandbox", exp.faults)


if TYPE_CHECKING:
    # The runner takes it as a RunTarget: mypy checks here that it is one.
    _RUN_TARGET: type[RunTarget] = SandboxTarget
