"""Member states as rsdrill names them: MongoDB's replica-set states (PRIMARY, SECONDARY,
RECOVERING, ...), STANDALONE for a server without a replica set, DOWN for one that does not
answer. One vocabulary for the probes, the guards, selection and the analyzers, and the one way
to ask a member its state (`member_state`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rsdrill.connection import ConnectOptions

STANDALONE = "STANDALONE"
DOWN = "DOWN"
# A router (mongos) of a sharded cluster that answers; it has no replica-set state.
ROUTER = "ROUTER"
# Serving its role again: what recovery waits for and the preflight wants of every member.
HEALTHY = frozenset({"PRIMARY", "SECONDARY", "ARBITER", STANDALONE})
# Accepts writes (a PRIMARY still draining says so in hello, not in its state).
PRIMARY_LIKE = frozenset({"PRIMARY", STANDALONE})
# What mongod without --replSet answers replSetGetStatus with. Compatible servers that lack
# the command answer CommandNotFound, and some still claim a replica set in hello (FerretDB's
# --repl-set-name): their hello says what they are.
NO_REPLICATION_ENABLED = 76
# What a member answers replSetGetStatus with once a newer config left it out (a forced
# reconfig by the survivors of an outage): REMOVED. (One never initiated: NotYetInitialized.)
INVALID_REPLICA_SET_CONFIG = 93
REMOVED = "REMOVED"


def own_state(status: Mapping[str, Any]) -> str | None:
    """The state a member's replSetGetStatus reply gives the member itself: STANDALONE for a
    mongod without replication, REMOVED for one left out of its set's config, its stateStr,
    or None when the reply names no member as
    itself (not initiated yet, still loading its config, or no such command): then its hello
    says (`hello_state`)."""
    if status.get("code") == NO_REPLICATION_ENABLED:
        return STANDALONE
    if status.get("code") == INVALID_REPLICA_SET_CONFIG:
        return REMOVED
    me = next((m for m in status.get("members", []) if m.get("self")), None)
    return str(me["stateStr"]) if me is not None and "stateStr" in me else None


def hello_state(hello: Mapping[str, Any]) -> str:
    """The state a hello (or isMaster) reply implies: a replica-set member's role; STANDALONE
    for a writable server that names no replica set and is not an uninitiated member of one;
    STARTUP otherwise (starting, or waiting for rs.initiate())."""
    writable = hello.get("isWritablePrimary") or hello.get("ismaster")
    if hello.get("setName"):
        if writable:
            return "PRIMARY"
        if hello.get("secondary"):
            return "SECONDARY"
        return "ARBITER" if hello.get("arbiterOnly") else "STARTUP"
    return STANDALONE if writable and not hello.get("isreplicaset") else "STARTUP"


def member_state(
    host: str,
    timeout_s: float,
    *,
    options: ConnectOptions,
    unreachable: str = DOWN,
) -> str:
    """Ask `host` its own state (replSetGetStatus, else its hello), `unreachable` when it does
    not answer. `AccessRefused` is raised: a member that refuses these settings is up."""
    # Here, not at the top: the vocabulary above is read where no driver is (`rsdrill validate`).
    from rsdrill.connection import AccessRefused, DirectConnection, WireClientError

    conn = DirectConnection(host, timeout_s, options)
    try:
        state = own_state(conn.command("admin", {"replSetGetStatus": 1}))
        return state if state is not None else hello_state(conn.hello())
    except AccessRefused:
        raise
    except WireClientError:
        return unreachable
    finally:
        conn.close()
