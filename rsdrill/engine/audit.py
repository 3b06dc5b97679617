"""The data audit: do the members hold the same data once they have all applied the same writes?

As MongoDB's own test runner checks after a fault: wait until every data-bearing member has
applied the primary's last write (by the optimes the primary reports), then compare `dbHash` of
each database on every member against the primary's; for a collection that differs, list which
`_id`s differ. What could not be compared is said, never reported as consistent.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import bson

from rsdrill.analysis.audit import (
    Divergence,
    Invalid,
    OplogDifference,
    OplogTail,
    differing_ids,
    divergent,
    oplog_differences,
)
from rsdrill.analysis.rollbacks import Writer, account
from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.engine.outcome import internal_error
from rsdrill.engine.rollbacks import (
    RollbackWatch,
    collection_uuids,
    rollback_files,
    rollback_ids,
    writers_of,
)
from rsdrill.errors import RsdrillError
from rsdrill.history import Op
from rsdrill.platforms.base import RunTarget
from rsdrill.platforms.discovery import discover_members
from rsdrill.redact import redact_uri
from rsdrill.result import (
    AuditDivergence,
    AuditInvalid,
    AuditOplogDifference,
    AuditResult,
    AuditRollback,
)

if TYPE_CHECKING:
    from rsdrill.probes import ProbeSet

# Not the user's data, or not replicated: never audited.
SYSTEM_DATABASES = ("admin", "config", "local")
# The databases rsdrill itself writes (its probes', a sandbox's preloaded data).
OWN_PREFIX = "rsdrill_"
COMMAND_TIMEOUT_S = 30.0
# How long a run's audit waits for the members to apply the primary's last write.
RUN_CATCH_UP_S = 30.0
# How many differing `_id`s a divergence names.
ID_SAMPLE = 10
# How many of each member's newest oplog entries are compared with the primary's.
OPLOG_TAIL = 20
_DATA_BEARING = ("PRIMARY", "SECONDARY")
# Reads a secondary answers (as a driver's direct connection asks).
_ANY_MEMBER = {"$readPreference": {"mode": "secondaryPreferred"}}


class AuditError(RsdrillError):
    """The audit could not compare: a member unreachable or unable to run dbHash."""


@dataclass
class AuditReport:
    primary: str
    members: list[str]
    databases: list[str]
    caught_up: bool
    # How long the members took to apply the primary's last write (up to the deadline).
    lag_s: float
    divergences: list[Divergence] = field(default_factory=list)
    # How many of its newest oplog entries each member's were compared on (None: not compared).
    oplog_compared: int | None = None
    oplog_differences: list[OplogDifference] = field(default_factory=list)
    oplog_error: str | None = None
    # How many collections were validated, on every member together (None: none was).
    validated: int | None = None
    invalid: list[Invalid] = field(default_factory=list)
    validate_error: str | None = None

    @property
    def consistent(self) -> bool:
        return (self.caught_up and not self.divergences and not self.invalid
                and not self.oplog_differences)  # fmt: skip


def audit(
    seeds: Sequence[str],
    options: ConnectOptions,
    *,
    databases: Sequence[str] | None = None,
    own_only: bool = False,
    catch_up_s: float = 30.0,
) -> AuditReport:
    """Audit the replica set the seeds reach: `databases`, else every user database (those of
    rsdrill's own, `rsdrill_*`, with `own_only`); AuditError when a member cannot be compared."""
    try:
        hosts = discover_members(list(seeds), options=options)
    except RsdrillError as exc:
        raise AuditError(str(exc)) from None
    with _Connections(options) as conns:
        primary, members = _data_bearing(conns, hosts)
        if len(members) < 2:  # "consistent" would claim a comparison that never happened
            raise AuditError(f"one data-bearing member ({primary}): nothing to compare it with")
        caught_up, lag_s = _wait_caught_up(conns, primary, members, catch_up_s)
        # Every member's databases, not only the primary's: one only a secondary holds diverges.
        asked = {"listDatabases": 1, "nameOnly": True, **_ANY_MEMBER}
        listed = {m: _user_databases(conns.command(m, "admin", asked), own_only=own_only)
                  for m in members}  # fmt: skip
        held = set().union(*listed.values())
        # A misspelt --db hashes as empty everywhere: "consistent" about nothing compared.
        absent = [d for d in databases or () if d not in held and d not in SYSTEM_DATABASES]
        if absent:
            raise AuditError(f"no member holds database {', '.join(absent)} (databases: "
                             f"{', '.join(sorted(held)) or 'none'})")  # fmt: skip
        names = list(databases) if databases else sorted(held)
        report = AuditReport(primary, members, names, caught_up, lag_s)
        if not caught_up:
            return report  # comparing members at different points would prove nothing
        hashes = {m: {db: _db_hash(conns, m, db) for db in names} for m in members}
        _validate_all(conns, report, hashes, background=not own_only)
        _compare_oplogs(conns, report)
        for found in divergent(primary, hashes):
            ours, theirs = _digests(conns, primary, found), _digests(conns, found.member, found)
            ids = differing_ids(ours, theirs, ID_SAMPLE)
            report.divergences.append(
                Divergence(found.member, found.database, found.collection, ids,
                           (len(ours), len(theirs)))
            )  # fmt: skip
        return report


class _Connections:
    """One connection per member, each command's failure an AuditError naming the member."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self._open: dict[str, DirectConnection] = {}

    def __enter__(self) -> _Connections:
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in self._open.values():
            conn.close()

    def command(self, host: str, db: str, body: dict[str, Any]) -> dict[str, Any]:
        conn = self._open.get(host)
        if conn is None:  # one per member, made once (the catch-up wait polls the primary)
            conn = self._open[host] = DirectConnection(host, COMMAND_TIMEOUT_S, self.options)
        try:
            reply = conn.command(db, body)
        except WireClientError as exc:
            raise AuditError(f"unreachable: {exc}") from None  # the error names the host
        if not reply.get("ok"):
            reason = reply.get("errmsg") or reply.get("codeName") or reply
            raise AuditError(f"{host}: cannot run {next(iter(body))} on {db}: {reason}")
        return reply


def _data_bearing(conns: _Connections, hosts: list[str]) -> tuple[str, list[str]]:
    """The primary and every data-bearing member, from a member's replSetGetStatus."""
    status = conns.command(hosts[0], "admin", {"replSetGetStatus": 1})
    states = {str(m["name"]): str(m.get("stateStr")) for m in status.get("members", [])}
    primary = next((host for host, state in states.items() if state == "PRIMARY"), None)
    if primary is None:
        listed = ", ".join(f"{h} {s}" for h, s in states.items())
        raise AuditError(f"no primary: members are {listed}")
    down = [f"{h} ({s})" for h, s in states.items() if s not in (*_DATA_BEARING, "ARBITER")]
    if down:
        raise AuditError(f"cannot compare members that are not up: {', '.join(down)}")
    return primary, [h for h, s in states.items() if s in _DATA_BEARING]


def _wait_caught_up(
    conns: _Connections, primary: str, members: list[str], deadline_s: float
) -> tuple[bool, float]:
    """Until every member's applied optime is the primary's own (as the primary reports them)."""
    started = time.monotonic()
    while True:
        status = conns.command(primary, "admin", {"replSetGetStatus": 1})
        optimes = {str(m["name"]): m.get("optime") for m in status.get("members", [])}
        if all(optimes.get(m) == optimes.get(primary) for m in members):
            return True, time.monotonic() - started
        if time.monotonic() - started >= deadline_s:
            return False, time.monotonic() - started
        time.sleep(0.1)


def _validate_all(
    conns: _Connections,
    report: AuditReport,
    hashes: dict[str, dict[str, dict[str, str]]],
    *,
    background: bool,
) -> None:
    """validate every collection dbHash listed, on each member; a member that cannot run it
    (no `validate` action, a server without it) ends the validation, said as its error. A
    user's collections are validated in the background (mongod 5.0+ then blocks no writes)."""
    body: dict[str, Any] = {"background": True} if background else {}
    validated = 0
    for member, databases in hashes.items():
        for db, collections in databases.items():
            for coll in collections:
                try:
                    reply = conns.command(member, db, {"validate": coll, **body, **_ANY_MEMBER})
                except AuditError as exc:
                    report.validate_error = str(exc)
                    return
                validated += 1
                if not reply.get("valid", True):
                    errors = tuple(str(e) for e in reply.get("errors", []))
                    report.invalid.append(Invalid(member, db, coll, errors))
    report.validated = validated


def _compare_oplogs(conns: _Connections, report: AuditReport) -> None:
    """Each member's newest OPLOG_TAIL entries against the primary's (reading the oplog needs
    find on local.oplog.rs; a member that refuses it is said as the comparison's error)."""
    body = {"find": "oplog.rs", "sort": {"$natural": -1}, "limit": OPLOG_TAIL, **_ANY_MEMBER}
    tails: dict[str, OplogTail] = {}
    for member in report.members:
        try:
            reply = conns.command(member, "local", body)
        except AuditError as exc:
            report.oplog_error = str(exc)
            return
        tails[member] = [
            (
                e.get("ts"),
                e.get("t"),
                hashlib.md5(bson.encode(e), usedforsecurity=False).hexdigest(),
            )
            for e in reply.get("cursor", {}).get("firstBatch", [])
        ]
    report.oplog_differences = oplog_differences(report.primary, tails)
    report.oplog_compared = len(tails[report.primary])


def _user_databases(reply: dict[str, Any], *, own_only: bool) -> list[str]:
    names = (str(d["name"]) for d in reply.get("databases", []))
    return sorted(name for name in names if name not in SYSTEM_DATABASES
                  and (not own_only or name.startswith(OWN_PREFIX)))  # fmt: skip


def to_result(report: AuditReport) -> AuditResult:
    """The report as result.json carries it."""
    return AuditResult(
        consistent=report.consistent,
        caught_up=report.caught_up,
        lag_s=round(report.lag_s, 3),
        primary=report.primary,
        members=report.members,
        databases=report.databases,
        divergences=[
            AuditDivergence(
                member=d.member,
                database=d.database,
                collection=d.collection,
                ids=[repr(i) for i in d.ids],
                primary_count=d.counts[0] if d.counts else None,
                member_count=d.counts[1] if d.counts else None,
            )
            for d in report.divergences
        ],
        oplog_compared=report.oplog_compared,
        oplog_differences=[
            AuditOplogDifference(member=o.member, ts=_words(o.ts), term=o.term, reason=o.reason)
            for o in report.oplog_differences
        ],
        oplog_error=report.oplog_error and redact_uri(report.oplog_error),
        validated=report.validated,
        invalid=[
            AuditInvalid(
                member=i.member, database=i.database, collection=i.collection, errors=list(i.errors)
            )
            for i in report.invalid
        ],
        validate_error=report.validate_error and redact_uri(report.validate_error),
    )


def _md5(document: dict[str, Any]) -> str:
    return hashlib.md5(bson.encode(document), usedforsecurity=False).hexdigest()


def _words(ts: Any) -> str:
    if isinstance(ts, bson.Timestamp):
        return f"Timestamp({ts.time}, {ts.inc})"
    return repr(ts)


def _db_hash(conns: _Connections, member: str, db: str) -> dict[str, str]:
    return dict(conns.command(member, db, {"dbHash": 1, **_ANY_MEMBER}).get("collections", {}))


def _digests(conns: _Connections, member: str, found: Divergence) -> list[tuple[Any, str]]:
    """(_id, MD5 of its BSON) of every document of the collection on `member`, in `_id` order."""
    body = {"find": found.collection, "sort": {"_id": 1}, "batchSize": 1000, **_ANY_MEMBER}
    reply = conns.command(member, found.database, body)
    out: list[tuple[Any, str]] = []
    while True:
        cursor = reply["cursor"]
        batch = cursor.get("firstBatch", cursor.get("nextBatch", []))
        out += [(doc["_id"], _md5(doc)) for doc in batch]
        if not cursor.get("id"):
            return out
        more = {"getMore": cursor["id"], "collection": found.collection, **_ANY_MEMBER}
        reply = conns.command(member, found.database, more)


def audit_result(
    members: Sequence[str],
    options: ConnectOptions,
    *,
    quick: bool,
    catch_up_s: float,
    watch: RollbackWatch | None = None,
    writers: Sequence[Writer] = (),
    ops: Sequence[Op] = (),
) -> AuditResult:
    """A run's audit step: the report as result.json carries it, or what kept the audit from
    comparing as its error (never a pass); with `watch`, the rollbacks since the run's start,
    matched against the `writers`' acknowledged writes in `ops`. It never raises, as the run's
    teardown comes next."""
    try:
        result = to_result(audit(members, options, own_only=quick, catch_up_s=catch_up_s))
    except AuditError as exc:
        result = AuditResult(error=redact_uri(str(exc)))
    except Exception as exc:  # the run's result and teardown come first
        result = AuditResult(error=redact_uri(internal_error(exc)))
    if watch is None:
        return result
    try:  # what the rollbacks took is worth knowing even when the members could not be compared
        result.rollbacks = _rollbacks(result, members, options, watch, writers, ops)
        result.rollbacks_accounted = True
    except Exception as exc:
        result.error = result.error or redact_uri(f"rollbacks: {internal_error(exc)}")
    return result


def _rollbacks(
    compared: AuditResult,
    members: Sequence[str],
    options: ConnectOptions,
    watch: RollbackWatch,
    writers: Sequence[Writer],
    ops: Sequence[Op],
) -> list[AuditRollback]:
    after = rollback_ids(members, options)
    host = compared.primary or members[0]
    names = collection_uuids(host, options, compared.databases)
    files = {m: rollback_files(d, watch.since_wall, names) if d is not None else None
             for m, d in watch.directories.items()}  # fmt: skip
    return account(watch.ids, after, files, writers, ops)


def run_audit(
    target: RunTarget,
    *,
    quick: bool,
    standalone: bool,
    watch: RollbackWatch | None,
    probes: ProbeSet | None,
    ops: Sequence[Op],
) -> AuditResult:
    """A run's audit, once its faults are reverted and its probes stopped with their data."""
    if standalone:
        return AuditResult(error="a standalone server has no other member to compare")
    return audit_result(target.members, target.connect_options, quick=quick,
                        catch_up_s=RUN_CATCH_UP_S, watch=watch,
                        writers=writers_of(probes.write_loops() if probes else []),
                        ops=ops)  # fmt: skip
