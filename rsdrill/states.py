"""Member states as rsdrill names them: MongoDB's replica-set states (PRIMARY, SECONDARY,
RECOVERING, ...), STANDALONE for a server without a replica set, DOWN for one that does not
answer. One vocabulary for the probes, the guards, selection and the analyzers, and the one way
to ask a member its state (`member_state`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rsdrill.connection import AccessRefused, ConnectOptions, DirectConnection, WireClientError

STANDALONE = "STANDALONE"
DOWN = "DOWN"
# Serving its role again: what recovery waits for and the preflight wants of every member.
HEALTHY = frozenset({"PRIMARY", "SECONDARY", "ARBITER", STANDALONE})
# Accepts writes (a PRIMARY still draining says so in hello, not in its state).
PRIMARY_LIKE = frozenset({"PRIMARY", STANDALONE})
# Codes a server answers replSetGetStatus with when it is not a replica-set member:
# NoReplicationEnabled (mongod without --replSet), CommandNotFound (compatible servers).
NOT_A_REPLICA_SET = frozenset({76, 59})


def own_state(status: Mapping[str, Any]) -> str | None:
    """The state a member's replSetGetStatus reply gives the member itself: STANDALONE without
    a replica set, its stateStr, or None when it names no member as itself (not initiated yet,
    still loading its config)."""
    if status.get("code") in NOT_A_REPLICA_SET:
        return STANDALONE
    me = next((m for m in status.get("members", []) if m.get("self")), None)
    return str(me["stateStr"]) if me is not None and "stateStr" in me else None


def member_state(
    host: str,
    timeout_s: float,
    *,
    options: ConnectOptions,
    unreachable: str = DOWN,
) -> str:
    """Ask `host` its own state (replSetGetStatus, else guessed from hello), `unreachable` when
    it does not answer. `AccessRefused` is raised: a member that refuses these settings is up."""
    conn = DirectConnection(host, timeout_s, options)
    try:
        state = own_state(conn.command("admin", {"replSetGetStatus": 1}))
        reply = conn.hello() if state is None else {}
    except AccessRefused:
        raise
    except WireClientError:
        return unreachable
    finally:
        conn.close()
    if state is not None:
        return state
    if reply.get("isWritablePrimary"):
        return "PRIMARY"
    if reply.get("secondary"):
        return "SECONDARY"
    return "ARBITER" if reply.get("arbiterOnly") else "STARTUP"
