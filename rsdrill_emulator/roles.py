"""What each command requires of the user who runs it (its resource and action); the built-in
roles' privileges are rsdrill/privileges.py's `role_privileges`."""

from __future__ import annotations

from typing import Any

from rsdrill.privileges import CLUSTER

# Commands whose action is named by a field of the command, on the collection it names.
_COLLECTION_ACTIONS = {
    "insert": "insert", "update": "update", "delete": "remove", "find": "find",
    "count": "find", "distinct": "find", "aggregate": "find", "findandmodify": "update",
    "create": "createCollection", "drop": "dropCollection", "createindexes": "createIndex",
    "dropindexes": "dropIndex", "listindexes": "listIndexes", "collstats": "collStats",
    "collmod": "collMod", "validate": "validate",
}  # fmt: skip
_DATABASE_ACTIONS = {"listcollections": "listCollections", "dbstats": "dbStats",
                     "dropdatabase": "dropDatabase", "dbhash": "dbHash"}  # fmt: skip
_CLUSTER_ACTIONS = {
    "replsetgetstatus": "replSetGetStatus", "replsetgetconfig": "replSetGetConfig",
    "replsetstepdown": "replSetStateChange", "replsetstepup": "replSetStateChange",
    "replsetfreeze": "replSetStateChange", "replsetreconfig": "replSetConfigure",
    "serverstatus": "serverStatus",
    "listdatabases": "listDatabases", "shutdown": "shutdown",
    "configurefailpoint": "configureFailPoint", "getcmdlineopts": "getCmdLineOpts",
    "getparameter": "getParameter",
}  # fmt: skip
# What members ask each other: only the members' own login (root here) may.
_INTERNAL = {"replsetheartbeat", "replsetrequestvotes", "replsetgetrbid", "getoplog",
             "hasoplog", "syncbegin", "clone"}  # fmt: skip


def required(name: str, db: str, body: dict[str, Any]) -> tuple[str, str] | None:
    """The (resource, action) command `name` on `db` needs; None when any logged-in user may
    run it (getMore, endSessions, ...)."""
    key = name.lower()
    if key == "renamecollection":
        # Run on admin, judged on the source's database (a move to another database needs
        # more on mongod; the sandbox asks the same).
        source = str(body.get(name) or "")
        return f"{source.partition('.')[0]}.", "renameCollectionSameDB"
    if key in _COLLECTION_ACTIONS:
        return f"{db}.{body.get(name)}", _COLLECTION_ACTIONS[key]
    if key in _DATABASE_ACTIONS:
        return f"{db}.", _DATABASE_ACTIONS[key]
    if key in _CLUSTER_ACTIONS:
        return CLUSTER, _CLUSTER_ACTIONS[key]
    if key in _INTERNAL:
        return CLUSTER, "__system"
    return None
