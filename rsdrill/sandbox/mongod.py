"""The mongod engine: sandbox members are real `mongod` processes when one is on PATH.

Deliberately small, and untested on machines without a mongod binary (the project's CI has none):
the launcher (`cluster.py`) does everything engine-neutral (pid files, signals, status, down);
this module only knows mongod's command line and how to initiate the set with the sandbox's
members, priorities, arbiter and settings.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pymongo.errors import PyMongoError

from rsdrill.sandbox.config import MemberSpec, ReplSetSpec, member_dir
from rsdrill.sandbox.errors import SandboxError
from rsdrill.sandbox.members import is_writable_primary, member_client

if TYPE_CHECKING:
    from rsdrill.sandbox.engine import Layout

_POLL_S = 0.05


class MongodEngine:
    """Members are `mongod --replSet` processes, initiated with replSetInitiate."""

    name = "mongod"

    def __init__(self, executable: str) -> None:
        self.executable = executable

    def argv(self, sandbox: Layout, member: MemberSpec, *, init: bool) -> list[str]:
        """mongod's command line; `init` changes nothing: replSetInitiate does the first boot."""
        spec = sandbox.spec
        directory = member_dir(sandbox.directory, member)
        address, port = member.host.rsplit(":", 1)
        oplog_mb = max(1, spec.oplog_size_bytes // (1024 * 1024))
        return [
            self.executable,
            "--replSet",
            spec.set_name,
            "--port",
            port,
            "--bind_ip",
            address,
            "--dbpath",
            str(directory / "data"),
            "--logpath",
            str(directory / "member.log"),
            "--logappend",
            "--oplogSize",
            str(oplog_mb),
            "--journalCommitInterval",
            str(spec.journal_commit_interval_ms),
            *self._cache(spec),
        ]

    @staticmethod
    def _cache(spec: ReplSetSpec) -> list[str]:
        """WiredTiger's cache for the set's `cache_bytes` (mongod accepts 0.25 GB at least)."""
        if spec.cache_bytes is None:
            return []
        return ["--wiredTigerCacheSizeGB", f"{max(0.25, spec.cache_bytes / 2**30):g}"]

    def initiate(self, sandbox: Layout, deadline: float) -> None:
        """replSetInitiate on the first member, then wait for any member to be writable."""
        spec = sandbox.spec
        first = spec.members[0]
        try:
            with member_client(first.host, timeout_s=30) as client:
                client.admin.command("replSetInitiate", replset_config(spec))
        except PyMongoError as exc:
            raise SandboxError(f"replSetInitiate on {first.host} failed: {exc}", 4) from exc
        options = sandbox.connect_options
        while not any(is_writable_primary(m.host, options) for m in spec.data_bearing):
            if time.monotonic() > deadline:
                raise SandboxError("the mongod replica set elected no primary in time", 4)
            time.sleep(_POLL_S)


def replset_config(spec: ReplSetSpec) -> dict[str, Any]:
    """The replica-set config document for replSetInitiate."""
    settings = spec.settings
    return {
        "_id": spec.set_name,
        "members": [
            {
                "_id": m.id,
                "host": m.host,
                "priority": m.priority,
                "votes": m.votes,
                "arbiterOnly": m.arbiter_only,
                "tags": m.tags,
            }
            for m in spec.members
        ],
        "settings": {
            "electionTimeoutMillis": settings.election_timeout_ms,
            "heartbeatIntervalMillis": settings.heartbeat_interval_ms,
            "heartbeatTimeoutSecs": settings.heartbeat_timeout_s,
            "catchUpTimeoutMillis": settings.catch_up_timeout_ms,
            "chainingAllowed": settings.chaining_allowed,
        },
    }
