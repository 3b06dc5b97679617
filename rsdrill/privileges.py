"""MongoDB's privileges: an action on a resource, and whether a user's privileges grant it.

One reading of MongoDB's resource documents for both sides: `rsdrill check` reads a real
server's `connectionStatus` with it, and the sandbox enforces its users' roles with it. The
built-in roles follow MongoDB's documentation for the actions that rsdrill, pymongo and the
usual tools use; `root` is simplified to every action on every resource (MongoDB composes it
from the *AnyDatabase and cluster roles).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

CLUSTER = "cluster"


def covers(resource: Mapping[str, Any], wanted: str) -> bool:
    """Whether a privilege's resource document covers `cluster` or `db.collection`.

    `{db: "", collection: ""}` is every database's non-system collections; `local.oplog.rs`
    and `system.*` collections are covered only where named (or by `anyResource`).
    """
    if resource.get("anyResource"):
        return True
    if wanted == CLUSTER:
        return bool(resource.get("cluster"))
    if "db" not in resource:
        return False
    db, _, collection = wanted.partition(".")
    res_db, res_coll = resource.get("db", ""), resource.get("collection", "")
    special = collection.startswith("system.") or (db == "local" and collection == "oplog.rs")
    coll_ok = res_coll == collection or (res_coll == "" and not special)
    return res_db in ("", db) and coll_ok


def granted(privileges: Iterable[Mapping[str, Any]], resource: str, action: str) -> bool:
    """Whether any of `privileges` ({resource, actions}) allows `action` on `resource`."""
    for privilege in privileges:
        actions = privilege.get("actions") or []
        if (action in actions or "anyAction" in actions) and covers(
            privilege.get("resource") or {}, resource
        ):
            return True
    return False


Privilege = dict[str, Any]

_READ = ["find", "listCollections", "listIndexes", "collStats", "dbStats", "killCursors",
         "changeStream", "dbHash"]  # fmt: skip
_WRITE = ["insert", "update", "remove", "createCollection", "dropCollection", "createIndex",
          "dropIndex", "renameCollectionSameDB"]  # fmt: skip
_DB_ADMIN = ["collStats", "dbStats", "listCollections", "listIndexes", "createCollection",
             "createIndex", "dropCollection", "dropIndex", "dropDatabase", "collMod",
             "validate"]  # fmt: skip
_MONITOR = ["serverStatus", "replSetGetStatus", "replSetGetConfig", "listDatabases",
            "getCmdLineOpts", "getParameter", "connPoolStats", "hostInfo", "top",
            "listShards"]  # fmt: skip
# What clusterManager may do to config.settings (the balancer's mode, the chunk size).
_BALANCER_SETTINGS = ["insert", "update", "remove"]
_MANAGER = ["replSetStateChange", "replSetConfigure", "replSetGetConfig", "replSetGetStatus",
            "listDatabases"]  # fmt: skip


def _on(db: str, actions: list[str], collection: str = "") -> Privilege:
    return {"resource": {"db": db, "collection": collection}, "actions": list(actions)}


def _cluster(actions: list[str]) -> Privilege:
    return {"resource": {"cluster": True}, "actions": list(actions)}


def role_privileges(role: str, db: str) -> list[Privilege]:
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
            _on("config", ["find"]),  # balancerStatus reads config.settings
        ],
        "clusterManager": [
            _cluster(_MANAGER),
            _on("local", ["find", "collStats", "dbStats", "killCursors"]),
            _on("config", ["find"]),
            _on("config", _BALANCER_SETTINGS, "settings"),  # balancerStop / balancerStart
        ],
        "hostManager": [_cluster(["shutdown", "configureFailPoint"])],
        "clusterAdmin": [
            _cluster(_MONITOR + _MANAGER + ["shutdown", "configureFailPoint"]),
            _on("", ["collStats", "dbStats", "dropDatabase"]),
            _on("local", ["find", "collStats", "killCursors"]),
            _on("config", ["find"]),
            _on("config", _BALANCER_SETTINGS, "settings"),
        ],
        "root": [{"resource": {"anyResource": True}, "actions": ["anyAction"]}],
    }
    if role not in table:
        raise ValueError(f"unknown built-in role {role!r}; the sandbox knows {', '.join(table)}")
    return table[role]
