"""What a deployment is, as its members say: topology, server version, handshake, storage engine,
the TLS and login rsdrill used, and whether it is rsdrill's own emulator.

A result states these facts so that a figure measured on the sandbox is never taken for one
measured on mongod, and `rsdrill check` refuses a server outside the versions rsdrill knows.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from rsdrill.connection import (
    ConnectOptions,
    DirectConnection,
    WireClientError,
    first_reply,
    handshake_form,
)
from rsdrill.domains import Placement, placement

# MongoDB versions whose replication and handshake rsdrill reads correctly (compatible servers
# that claim a version in this range are taken at their word).
MIN_VERSION = (4, 4)
MAX_VERSION = (8, 0)
# What the sandbox's emulator says in buildInfo.gitVersion and its storage engines' names.
EMULATOR_GIT_VERSION = "rsdrill-sandbox"
EMULATOR_ENGINE_PREFIX = "rsdrill-"


@dataclass(frozen=True)
class Deployment:
    """The facts, as one member answered them (None: the server would not say)."""

    topology: (
        str  # "replica set", "standalone", "sharded" (a mongos) or "replica set (uninitiated)"
    )
    set_name: str | None
    version: str | None
    handshake: str  # "hello" or "isMaster"
    streaming_hello: bool  # the server sends topologyVersion: drivers stream its hello
    storage_engine: str | None
    emulator: bool
    tls: bool
    auth_mechanism: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def is_standalone(self) -> bool:
        return self.topology == "standalone"


def topology_of(hello: dict[str, Any]) -> str:
    """The kind of server a hello (or isMaster) reply describes, as drivers classify it."""
    if hello.get("msg") == "isdbgrid":
        return "sharded"
    if hello.get("setName"):
        return "replica set"
    if hello.get("isreplicaset"):
        return "replica set (uninitiated)"
    return "standalone"


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """(major, minor, patch) of "7.0.12", "4.4.1-ent", "8.0.0-rc3"; None when unreadable."""
    if not version:
        return None
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if found is None:
        return None
    return tuple(int(part) for part in found.groups(default="0"))


def version_problem(version: str | None) -> str | None:
    """Why rsdrill cannot vouch for its measurements on this server version (None: it can)."""
    parsed = version_tuple(version)
    if parsed is None:
        return f"server version {version!r} cannot be read"
    low, high = MIN_VERSION, MAX_VERSION
    if parsed[:2] < low or parsed[:2] > high:
        return (
            f"server version {version} is outside the range rsdrill supports "
            f"({low[0]}.{low[1]} to {high[0]}.{high[1]})"
        )
    return None


def inspect(host: str, timeout_s: float = 5.0, *, options: ConnectOptions) -> Deployment:
    """Ask one member; WireClientError when it does not answer (or refuses us)."""
    conn = DirectConnection(host, timeout_s, options)
    try:
        hello = conn.hello()
        build = conn.command("admin", {"buildInfo": 1})
        status = conn.command("admin", {"serverStatus": 1, "metrics": 0, "locks": 0})
    finally:
        conn.close()
    engine = (status.get("storageEngine") or {}).get("name") if status.get("ok") else None
    engines = [str(e) for e in build.get("storageEngines") or []]
    emulator = build.get("gitVersion") == EMULATOR_GIT_VERSION or any(
        e.startswith(EMULATOR_ENGINE_PREFIX) for e in [*engines, engine or ""]
    )
    described = conn.options.describe()
    return Deployment(
        topology=topology_of(hello),
        set_name=hello.get("setName"),
        version=build.get("version") if build.get("ok") else None,
        handshake=handshake_form(host),
        streaming_hello="topologyVersion" in hello,
        storage_engine=engine,
        emulator=emulator,
        tls=described["tls"],
        auth_mechanism=conn.logged_in_with or described["auth_mechanism"],
    )


def inspect_any(
    hosts: list[str], timeout_s: float = 5.0, *, options: ConnectOptions
) -> Deployment | None:
    """The first member that answers, or None when none does."""
    for host in hosts:
        try:
            return inspect(host, timeout_s, options=options)
        except WireClientError:
            continue
    return None


def config_placements(config: dict[str, Any]) -> list[Placement]:
    """Each member's failure domain and votes, from a replSetGetConfig `config` document."""
    return [placement(str(m.get("host")), int(m.get("votes", 1)), m.get("tags") or {})
            for m in config.get("members") or []]  # fmt: skip


def read_placements(hosts: list[str], timeout_s: float = 5.0, *,
                    options: ConnectOptions) -> list[Placement]:  # fmt: skip
    """The members' placements as the first member that answers replSetGetConfig gives them
    (none when no member does: not a replica set, or a login without clusterMonitor)."""
    reply = first_reply(hosts, "admin", {"replSetGetConfig": 1}, timeout_s, options=options,
                        ok_only=True)  # fmt: skip
    return config_placements(reply.get("config") or {}) if reply is not None else []
