"""`recovery: {force_reconfig: {after}}`: MongoDB's procedure for a replica set that lost its
voting majority, carried out by the run and undone as a fault is.

`after` seconds from the moment the schedule leaves fewer than a majority of the voting members
up (MongoDB elects no primary meanwhile: that wait is the decision and the runbook's time), the
members that still answer are the survivors. The one with the newest applied optime gets the
current config cut down to the survivors with `replSetReconfig {force: true}` (the docs'
advice: force on the most up-to-date survivor); they then elect a primary among themselves.

The undo (the heal) is owed from before the command is sent: journaled as a resource, so a run
that dies leaves it to `rsdrill recover`. Once the faults are reverted, each member the forced
config left out, back and REMOVED, is added again as MongoDB's procedure says: without a vote
(`votes: 0, priority: 0`), which adds no voter and so needs no majority of its own; once it is
SECONDARY (it rolled back what the survivors never had, and caught up) its votes and priority
are given back, one voter per reconfig.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bson.timestamp import Timestamp

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError, action_options
from rsdrill.deployment import read_placements
from rsdrill.domains import PlatformPlace, placed_by_platform
from rsdrill.engine.guards import majority_lost_at
from rsdrill.engine.journal import Journal
from rsdrill.errors import GuardRefusal
from rsdrill.experiment.schema import Fault, Recovery
from rsdrill.platforms.base import TargetError
from rsdrill.redact import redact_uri
from rsdrill.result import ReAdded, RecoveryDone
from rsdrill.states import DOWN, member_state

REVERT_ACTION = "replset-re-add"
KEY = "resource:forced-reconfig"
ASK_TIMEOUT_S = 2.0
POLL_S = 0.05
PRIMARY_WAIT_S = 60.0
# After the faults: a lost member answering again (a host restarted, a zone back), and then
# SECONDARY again (a rollback, and the catch-up on what it missed).
BACK_WAIT_S = 120.0
SECONDARY_WAIT_S = 300.0
RECONFIG_TIMEOUT_S = 70.0  # the safe reconfig waits for the config in force, then the new one
# The member fields a re-added member gets back (the rest of its document is the server's).
_KEPT = ("_id", "host", "arbiterOnly", "priority", "votes", "tags")


def _command(host: str, options: ConnectOptions, cmd: dict[str, Any], timeout_s: float
             ) -> dict[str, Any] | None:  # fmt: skip
    """`cmd` on `host`; None when it does not answer."""
    conn = DirectConnection(host, timeout_s, options)
    try:
        return conn.command("admin", cmd)
    except WireClientError:
        return None
    finally:
        conn.close()


def _config(hosts: Sequence[str], options: ConnectOptions) -> dict[str, Any]:
    """The config of the first member that gives one (the primary's, when asked first)."""
    for host in hosts:
        reply = _command(host, options, {"replSetGetConfig": 1}, ASK_TIMEOUT_S)
        if reply and reply.get("ok"):
            return dict(reply["config"])
    raise TargetError(f"no member gave its replica-set config ({', '.join(hosts)})")


def _applied(status: Mapping[str, Any]) -> tuple[int, Timestamp]:
    """A member's newest applied optime (the oldest possible when its status was not read)."""
    optime = (status.get("optimes") or {}).get("appliedOpTime") or {}
    return int(optime.get("t", -1)), optime.get("ts") or Timestamp(0, 0)


def _writable_primary(hosts: Sequence[str], options: ConnectOptions) -> str | None:
    for host in hosts:
        hello = _command(host, options, {"hello": 1}, ASK_TIMEOUT_S)
        if hello and hello.get("isWritablePrimary"):
            return host
    return None


def _reconfig(host: str, options: ConnectOptions, config: dict[str, Any], **extra: Any) -> None:
    reply = _command(host, options, {"replSetReconfig": config, **extra,
                                     "maxTimeMS": int(RECONFIG_TIMEOUT_S * 1000) - 10_000},
                     RECONFIG_TIMEOUT_S)  # fmt: skip
    if reply is None or not reply.get("ok"):
        why = "no answer" if reply is None else reply.get("errmsg") or reply
        raise TargetError(redact_uri(f"replSetReconfig on {host}: {why}"))


def _wait(done: Callable[[], Any], timeout_s: float, sleep: Callable[[float], None]) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := done()):
        if time.monotonic() >= deadline:
            return None
        sleep(POLL_S)
    return found


class MajorityRecovery:
    """The run's forced reconfig (`force`, when due) and its undo (`heal`, after the faults)."""

    def __init__(self, recovery: Recovery | None, event: Callable[[str], None]) -> None:
        self.recovery = recovery
        self.event = event
        self.done: RecoveryDone | None = None
        self._hosts: list[str] = []
        self._options = ConnectOptions()
        self._owed: list[dict[str, Any]] = []  # the members the heal adds back

    def due_at(self, faults: Sequence[Fault], hosts: list[str], options: ConnectOptions,
               places: Mapping[str, PlatformPlace]) -> float | None:  # fmt: skip
        """When the forced reconfig runs: `after` from the moment the schedule leaves fewer
        than a majority of the set's voting members up (counted as the quorum guard counts);
        GuardRefusal when it never does (nothing to recover)."""
        if self.recovery is None:
            return None
        placed = placed_by_platform(read_placements(hosts, ASK_TIMEOUT_S, options=options),
                                    places)  # fmt: skip
        voting = sum(1 for p in placed if p.votes)
        loss_at_s = majority_lost_at(faults, voting, placed)
        if loss_at_s is None:
            raise GuardRefusal("recovery", "recovery.force_reconfig: the faults never leave "
                               "fewer than a majority of the voting members up: there is no "
                               "lost majority to recover")  # fmt: skip
        self.done = RecoveryDone(loss_at_s=round(loss_at_s, 3))
        return loss_at_s + self.recovery.force_reconfig.after

    def force(self, hosts: Sequence[str], options: ConnectOptions, journal: Journal,
              now: Callable[[], float], sleep: Callable[[float], None]) -> None:  # fmt: skip
        """Reconfigure the survivors with force and wait for their primary."""
        assert self.done is not None
        self._hosts, self._options = list(hosts), options
        states = {h: member_state(h, ASK_TIMEOUT_S, options=options) for h in hosts}
        if all(state == DOWN for state in states.values()):
            raise TargetError("recovery.force_reconfig: no member answers: nothing to reconfigure")
        config = _config([h for h in hosts if states[h] != DOWN], options)
        survivors = [m for m in config["members"] if states.get(m["host"], DOWN) != DOWN]
        statuses = {m["host"]: _command(m["host"], options, {"replSetGetStatus": 1},
                                        ASK_TIMEOUT_S) or {} for m in survivors}  # fmt: skip
        freshest = max(statuses, key=lambda h: _applied(statuses[h]))
        self._owed = [{k: m[k] for k in _KEPT if k in m} for m in config["members"]
                      if m not in survivors]  # fmt: skip
        journal.write("resource", key=KEY, revert=self.revert_action())
        forced = {**config, "version": int(config["version"]) + 1, "members": survivors}
        self.event(f"recovery: majority lost; forced reconfig on {freshest} keeping "
                   f"{', '.join(m['host'] for m in survivors)}")  # fmt: skip
        _reconfig(freshest, options, forced, force=True)
        self.done.forced_at_s = round(now(), 3)
        self.done.sent_to, self.done.survivors = freshest, [m["host"] for m in survivors]
        self.done.version = int(_config([freshest], options)["version"])
        primary = _wait(lambda: _writable_primary(self.done.survivors if self.done else [],
                                                  options), PRIMARY_WAIT_S, sleep)  # fmt: skip
        if primary is None:
            raise TargetError(f"recovery.force_reconfig: no survivor became primary within "
                              f"{PRIMARY_WAIT_S:.0f}s of the forced reconfig")  # fmt: skip
        self.done.primary_at_s = round(now(), 3)
        self.event(f"recovery: {primary} primary after the forced reconfig")

    def revert_action(self) -> dict[str, Any]:
        """What `rsdrill recover` does if the run dies after the forced reconfig."""
        return {"action": REVERT_ACTION, "hosts": self._hosts, "members": self._owed,
                "connect": self._options.journaled()}  # fmt: skip

    def heal(self, journal: Journal, now: Callable[[], float]) -> str | None:
        """Add the lost members back, if this run forced them out; the failure's message, if
        any (the journal then still owes it to `rsdrill recover`)."""
        if not self._owed or self.done is None:
            return None
        try:
            self.done.re_added = add_back(self._hosts, self._owed, self._options, now,
                                          time.sleep, self.event)  # fmt: skip
        except TargetError as exc:
            self.done.error = str(exc)
            self.event(f"recovery: not healed: {exc}")
            return f"recovery not healed (run `rsdrill recover`): {exc}"
        journal.write("released", key=KEY)
        self._owed = []
        return None


def add_back(hosts: Sequence[str], members: Sequence[Mapping[str, Any]], options: ConnectOptions,
             now: Callable[[], float], sleep: Callable[[float], None],
             event: Callable[[str], None]) -> list[ReAdded]:  # fmt: skip
    """MongoDB's procedure for members a forced reconfig left out: each, once it answers
    again, added without a vote, then given its own votes and priority once SECONDARY. A member
    already in the config is left as it is (so `rsdrill recover` may run it twice)."""
    done = []
    for member in members:
        primary = _wait(lambda: _writable_primary(hosts, options), PRIMARY_WAIT_S, sleep)
        if primary is None:
            raise TargetError(f"no writable primary among {', '.join(hosts)} to add "
                              f"{member['host']} to")  # fmt: skip
        if not any(m["host"] == member["host"] for m in _config([primary], options)["members"]):
            done.append(_add_one(primary, member, options, now, sleep, event))
    return done


def _add_one(primary: str, member: Mapping[str, Any], options: ConnectOptions,
             now: Callable[[], float], sleep: Callable[[float], None],
             event: Callable[[str], None]) -> ReAdded:  # fmt: skip
    host = str(member["host"])
    if _wait(lambda: _command(host, options, {"hello": 1}, ASK_TIMEOUT_S), BACK_WAIT_S,
             sleep) is None:  # fmt: skip
        raise TargetError(f"{host} did not answer within {BACK_WAIT_S:.0f}s to be added back")
    record = ReAdded(host=host)
    config = _config([primary], options)
    config["version"] = int(config["version"]) + 1
    config["members"] = [*config["members"], {**member, "votes": 0, "priority": 0}]
    _reconfig(primary, options, config)
    record.added_at_s = round(now(), 3)
    event(f"recovery: {host} added back without a vote")
    if _wait(lambda: member_state(host, ASK_TIMEOUT_S, options=options) == "SECONDARY",
             SECONDARY_WAIT_S, sleep) is None:  # fmt: skip
        raise TargetError(f"{host} was not SECONDARY within {SECONDARY_WAIT_S:.0f}s of being "
                          "added back")  # fmt: skip
    record.secondary_at_s = round(now(), 3)
    if int(member.get("votes", 1)) or float(member.get("priority", 1)):
        config = _config([primary], options)
        config["version"] = int(config["version"]) + 1
        for m in config["members"]:
            if m["host"] == host:
                m.update(votes=member.get("votes", 1), priority=member.get("priority", 1))
        _reconfig(primary, options, config)
    record.restored_at_s = round(now(), 3)
    event(f"recovery: {host} SECONDARY, its votes and priority given back")
    return record


def re_add(action: dict[str, Any]) -> str:
    """Revert action `replset-re-add`: add back the members a forced reconfig left out."""
    options = action_options(action, login=True)
    members = list(action.get("members") or [])
    started = time.monotonic()
    hosts = [str(h) for h in action["hosts"]]
    added = add_back(hosts, members, options, lambda: time.monotonic() - started, time.sleep,
                     lambda _line: None)  # fmt: skip
    names = ", ".join(r.host for r in added) or "none was missing"
    return f"members added back after the forced reconfig: {names}"
