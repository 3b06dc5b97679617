"""MongoDB's privileges: an action on a resource, and whether a user's privileges grant it.

One reading of MongoDB's resource documents for both sides: `rsdrill check` reads a real
server's `connectionStatus` with it, and the sandbox enforces its users' roles with it.
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
