"""MongoDB's built-in roles, as far as the sandbox needs them, and what each command requires.

The privileges follow MongoDB's documentation of its built-in roles for the actions that
rsdrill, pymongo and the usual tools use. `root` is simplified to every action on every
resource (MongoDB composes it from the *AnyDatabase and cluster roles).
"""

from __future__ import annotations

from typing import Any

from rsdrill.privileges import CLUSTER

Privilege = dict[str, Any]

_READ = ["find", "listCollections", "listIndexes", "collStats", "dbStats", "killCursors",
         "changeStream", "dbHash"]  # fmt: skip
_WRITE = ["insert", "update", "remove", "createCollection", "dropCollection", "createIndex",
          "dropIndex", "renameCollectionSameDB"]  # fmt: skip
_DB_ADMIN = ["collStats", "dbStats", "listCollections", "listIndexes", "createCollection",
             "createIndex", "dropCollection", "dropIndex", "dropDatabase", "collMod"]  # fmt: skip
_MONITOR = ["serverStatus", "replSetGetStatus", "replSetGetConfig", "listDatabases",
            "getCmdLineOpts", "getParameter", "connPoolStats", "hostInfo", "top"]  # fmt: skip
_MANAGER = ["replSetStateChange", "replSetConfigure", "replSetGetConfig", "replSetGetStatus",
            "listDatabases"]  # fmt: skip


def _on(db: str, actions: list[str], collection: str = "") -> Privilege:
    return {"resource": {"db": db, "collection": collection}, "actions": list(actions)}


def _cluster(actions: list[str]) -> Privilege:
    return {"resource": {"cluster": True}, "actions": list(actions)}


def privileges(role: str, db: str) -> list[Privilege]:
    """The privileges of built-in role `role` held on database `db` (ValueError if unknown)."""
    table: dict[str, list[Privilege]] = {
        "read": [_on(db, _READ)],
        "readWrite": [_on(db, _READ + _WRITE)],
        "dbAdmin": [_on(db, _DB_ADMIN)],
        "readAnyDatabase": [_on("", _READ), _cluster(["listDatabases"])],
        "readWriteAnyDatabase": [_on("", _READ + _WRITE), _cluster(["listDatabases"])],
        "clusterMonitor": [
            _cluster(_MONITOR),
            _on("", ["collStats", "dbStats"]),
            _on("local", ["find"], "system.replset"),
        ],
        "clusterManager": [
            _cluster(_MANAGER),
            _on("local", ["find", "collStats", "dbStats", "killCursors"]),
        ],
        "hostManager": [_cluster(["shutdown", "configureFailPoint"])],
        "clusterAdmin": [
            _cluster(_MONITOR + _MANAGER + ["shutdown", "configureFailPoint"]),
            _on("", ["collStats", "dbStats", "dropDatabase"]),
            _on("local", ["find", "collStats", "killCursors"]),
        ],
        "root": [{"resource": {"anyResource": True}, "actions": ["anyAction"]}],
    }
    if role not in table:
        raise ValueError(f"unknown built-in role {role!r}; the sandbox knows {', '.join(table)}")
    return table[role]


# Commands whose action is named by a field of the command, on the collection it names.
_COLLECTION_ACTIONS = {
    "insert": "insert", "update": "update", "delete": "remove", "find": "find",
    "count": "find", "distinct": "find", "aggregate": "find", "findandmodify": "update",
    "create": "createCollection", "drop": "dropCollection", "createindexes": "createIndex",
    "dropindexes": "dropIndex", "listindexes": "listIndexes", "collstats": "collStats",
    "collmod": "collMod",
}  # fmt: skip
_DATABASE_ACTIONS = {"listcollections": "listCollections", "dbstats": "dbStats",
                     "dropdatabase": "dropDatabase", "dbhash": "dbHash"}  # fmt: skip
_CLUSTER_ACTIONS = {
    "replsetgetstatus": "replSetGetStatus", "replsetgetconfig": "replSetGetConfig",
    "replsetstepdown": "replSetStateChange", "replsetstepup": "replSetStateChange",
    "replsetfreeze": "replSetStateChange", "serverstatus": "serverStatus",
    "listdatabases": "listDatabases", "shutdown": "shutdown",
    "configurefailpoint": "configureFailPoint", "getcmdlineopts": "getCmdLineOpts",
    "getparameter": "getParameter",
}  # fmt: skip
# What members ask each other: only the members' own login (root here) may.
_INTERNAL = {"replsetheartbeat", "replsetrequestvotes", "getoplog", "hasoplog", "syncbegin",
             "clone"}  # fmt: skip


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
