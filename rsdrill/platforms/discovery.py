"""What a target is made of, as its servers say: a replica set's members (its hello); a sharded
cluster's shards (a router's `listShards`), config servers (the router's `serverStatus`), each
set's members and the routers the connection string names. And, for a connection string that
names a replica-set member where a router was meant, where that member's cluster keeps its
routers (`config.mongos`)."""

from __future__ import annotations

import datetime
from typing import Any

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.deployment import topology_of
from rsdrill.errors import TargetError
from rsdrill.experiment.cluster_fit import misfit
from rsdrill.experiment.schema import Experiment
from rsdrill.layout import ShardedLayout

HELLO_TIMEOUT_S = 5.0
# A router whose record in config.mongos is older than this is not named as one to use (the
# record stays after a router is gone; mongos rewrites it every 10 s while it runs).
_ROUTER_SEEN_S = 600.0
_SECONDARY_OK = {"$readPreference": {"mode": "primaryPreferred"}}


def discover_members(
    seeds: list[str], timeout_s: float = HELLO_TIMEOUT_S, *, options: ConnectOptions
) -> list[str]:
    """Every member (data-bearing, passive, arbiter) as the first seed that answers lists them;
    a standalone server is its own only member."""
    problems = []
    for seed in seeds:
        try:
            hello = _hello(seed, timeout_s, options)
        except WireClientError as exc:
            problems.append(str(exc))
            continue
        topology = topology_of(hello)
        if topology == "standalone":
            return [seed]
        if topology == "sharded":
            raise TargetError(f"{seed} is a mongos (sharded cluster): say "
                              "`topology: sharded`, or point target.uri at a replica "
                              "set")  # fmt: skip
        members = [*hello.get("hosts", []), *hello.get("passives", []),
                   *hello.get("arbiters", [])]  # fmt: skip
        if not members:
            problems.append(f"{seed}: answers, but is not a replica-set member")
            continue
        return [str(m) for m in members]
    raise TargetError("no member of the replica set answers: " + "; ".join(problems))


def discover_cluster(
    seeds: list[str], timeout_s: float = HELLO_TIMEOUT_S, *, options: ConnectOptions
) -> ShardedLayout:
    """The cluster behind the routers `seeds`; TargetError when a seed is no router or the
    routers cannot say what the cluster is made of."""
    routers, problems = [], []
    for seed in seeds:
        try:
            hello = _hello(seed, timeout_s, options)
        except WireClientError as exc:
            problems.append(str(exc))
            routers.append(seed)  # in the URI, so the client uses it: a router that is down
            continue
        if topology_of(hello) != "sharded":
            raise TargetError(not_a_router(seed, hello, timeout_s, options=options))
        routers.append(seed)
    if len(problems) == len(seeds):
        raise TargetError("no router of the sharded cluster answers: " + "; ".join(problems))
    shards, config = _shards_and_config(routers, timeout_s, options)
    sets = {}
    for name, hosts in (("config servers", config), *shards.items()):
        try:
            sets[name] = tuple(discover_members(hosts, timeout_s, options=options))
        except TargetError as exc:
            raise TargetError(f"{name}: {exc}") from None
    config_members = sets.pop("config servers")
    return ShardedLayout(config=config_members, shards=sets, routers=tuple(routers))


def found_cluster(exp: Experiment, seeds: list[str], options: ConnectOptions) -> ShardedLayout:
    """The cluster behind `seeds`, refused (TargetError) when the experiment names a shard,
    router or member it has not."""
    layout = discover_cluster(seeds, options=options)
    problem = misfit(exp, layout)
    if problem is not None:
        raise TargetError(problem)
    return layout


def _shards_and_config(
    routers: list[str], timeout_s: float, options: ConnectOptions
) -> tuple[dict[str, list[str]], list[str]]:
    """Each shard's seeds by shard name and the config servers' seeds, from the first router
    that answers both."""
    problems = []
    for router in routers:
        try:
            listed = _ask(router, {"listShards": 1}, timeout_s, options)
            status = _ask(router, {"serverStatus": 1}, timeout_s, options)
        except WireClientError as exc:
            problems.append(str(exc))
            continue
        if not listed.get("ok"):
            problems.append(f"{router}: listShards: {listed.get('errmsg')} (a sharded run "
                            "needs clusterMonitor)")  # fmt: skip
            continue
        config = (status.get("sharding") or {}).get("configsvrConnectionString")
        if not config:
            problems.append(f"{router}: serverStatus does not name the config servers "
                            f"({status.get('errmsg') or 'no sharding section'})")  # fmt: skip
            continue
        shards = {str(s["_id"]): seeds_of(str(s["host"])) for s in listed.get("shards") or []}
        if not shards:
            problems.append(f"{router}: the cluster has no shard (listShards is empty)")
            continue
        return shards, seeds_of(str(config))
    raise TargetError("the routers do not describe the cluster: " + "; ".join(problems))


def seeds_of(connection_string: str) -> list[str]:
    """The hosts of a shard's or the config servers' "<set>/<host>,<host>" string."""
    _, _, hosts = connection_string.rpartition("/")
    return [h for h in hosts.split(",") if h]


def not_a_router(
    seed: str, hello: dict[str, Any], timeout_s: float = HELLO_TIMEOUT_S, *,
    options: ConnectOptions,
) -> str:  # fmt: skip
    """What to tell a user whose `topology: sharded` URI names `seed`, which is no router: what
    it is, and the cluster's routers when its config servers list them."""
    set_name = hello.get("setName")
    what = f"a member of replica set {set_name}" if set_name else "a server without routers"
    identity = _first(seed, "admin", "system.version", {"_id": "shardIdentity"}, timeout_s,
                      options)  # fmt: skip
    config: list[str] = []
    if identity:
        what += f" (shard {identity.get('shardName')} of a sharded cluster)"
        config = seeds_of(str(identity.get("configsvrConnectionString") or ""))
    elif set_name and _first(seed, "config", "shards", {}, timeout_s, options):
        what += " (the config servers of a sharded cluster)"
        config = [str(h) for h in hello.get("hosts") or [seed]]
    message = f"target.uri names {seed}, {what}, not a router (mongos)"
    routers = known_routers(config, timeout_s, options=options)
    if routers:
        return f"{message}: point target.uri at the cluster's routers: mongodb://" + ",".join(
            routers) + "/ (as its config servers list them)"  # fmt: skip
    if config:
        return f"{message}; its config servers list no router that ran lately"
    return f"{message}; topology: sharded needs the routers in target.uri"


def known_routers(
    config: list[str], timeout_s: float = HELLO_TIMEOUT_S, *, options: ConnectOptions
) -> list[str]:
    """The routers recorded in config.mongos that ran in the last 10 minutes (by last ping),
    from the first config server that answers; [] when none answers or lists one."""
    now = datetime.datetime.now(datetime.UTC)
    for host in config:
        try:
            records = _find(host, "config", "mongos", {}, timeout_s, options)
        except WireClientError:
            continue
        if records is None:
            continue
        recent = [r for r in records if isinstance(r.get("ping"), datetime.datetime)
                  and (now - _utc(r["ping"])).total_seconds() < _ROUTER_SEEN_S]  # fmt: skip
        return sorted(str(r["_id"]) for r in recent)
    return []


def _utc(moment: datetime.datetime) -> datetime.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def _first(seed: str, db: str, coll: str, query: dict[str, Any], timeout_s: float,
           options: ConnectOptions) -> dict[str, Any] | None:  # fmt: skip
    try:
        found = _find(seed, db, coll, query, timeout_s, options)
    except WireClientError:
        return None
    return found[0] if found else None


def _find(host: str, db: str, coll: str, query: dict[str, Any], timeout_s: float,
          options: ConnectOptions) -> list[dict[str, Any]] | None:  # fmt: skip
    """The documents (one batch, enough for these small collections); None when refused."""
    reply = _ask(host, {"find": coll, "filter": query, "batchSize": 1000, **_SECONDARY_OK},
                 timeout_s, options, db=db)  # fmt: skip
    if not reply.get("ok"):
        return None
    return list((reply.get("cursor") or {}).get("firstBatch") or [])


def _ask(host: str, cmd: dict[str, Any], timeout_s: float, options: ConnectOptions, *,
         db: str = "admin") -> dict[str, Any]:  # fmt: skip
    conn = DirectConnection(host, timeout_s, options)
    try:
        return conn.command(db, cmd)
    finally:
        conn.close()


def _hello(host: str, timeout_s: float, options: ConnectOptions) -> dict[str, Any]:
    conn = DirectConnection(host, timeout_s, options)
    try:
        return conn.hello()
    finally:
        conn.close()
