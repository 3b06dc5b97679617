"""Member states as rsdrill names them: MongoDB's replica-set states (PRIMARY, SECONDARY,
RECOVERING, ...), STANDALONE for a server without a replica set, DOWN for one that does not
answer. One vocabulary for the probes, the guards, selection and the analyzers."""

from __future__ import annotations

STANDALONE = "STANDALONE"
DOWN = "DOWN"
# Serving its role again: what recovery waits for and the preflight wants of every member.
HEALTHY = frozenset({"PRIMARY", "SECONDARY", "ARBITER", STANDALONE})
# Accepts writes (a PRIMARY still draining says so in hello, not in its state).
PRIMARY_LIKE = frozenset({"PRIMARY", STANDALONE})
# Codes a server answers replSetGetStatus with when it is not a replica-set member:
# NoReplicationEnabled (mongod without --replSet), CommandNotFound (compatible servers).
NOT_A_REPLICA_SET = frozenset({76, 59})
