"""Which member a fault's `select:` means right now: from each member's own replSetGetStatus, or
from the failover probe's latest hello answers when they are fresh."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from rsdrill.connection import AccessRefused, ConnectOptions, answers_hello
from rsdrill.deployment import read_placements
from rsdrill.domains import Placement, domains_held, placed_by_platform
from rsdrill.errors import RsdrillError
from rsdrill.experiment.probes import FailoverProbe
from rsdrill.experiment.schema import (
    Fault,
    SelectCount,
    SelectDomain,
    Selection,
    SelectMember,
    SelectRouter,
    SelectShard,
    describe_selection,
)
from rsdrill.history import Op
from rsdrill.layout import CONFIG, ShardedLayout
from rsdrill.platforms.base import RunTarget, TargetError
from rsdrill.platforms.domain_members import platform_places
from rsdrill.states import DOWN, HEALTHY, PRIMARY_LIKE, ROUTER, member_state


class SelectionError(RsdrillError):
    """The selection matches nothing in the live replica set; the fault is not injected."""


def _state(host: str, timeout_s: float, options: ConnectOptions) -> str:
    try:
        return member_state(host, timeout_s, options=options)
    except AccessRefused as exc:  # not down: unreachable with these settings, say so now
        raise TargetError(str(exc)) from None


def current_states(
    members: list[str], timeout_s: float = 0.3, *, options: ConnectOptions
) -> dict[str, str]:
    """Each member's own state (PRIMARY, SECONDARY, ...), DOWN when it does not answer."""
    with ThreadPoolExecutor(max_workers=max(len(members), 1)) as pool:
        states = pool.map(lambda h: _state(h, timeout_s, options), members)
        return dict(zip(members, states, strict=True))


def router_states(
    layout: ShardedLayout | None, timeout_s: float = 0.3, *, options: ConnectOptions
) -> dict[str, str]:
    """Each router of a sharded target: ROUTER when it answers a handshake, DOWN otherwise."""
    routers = layout.routers if layout else ()
    with ThreadPoolExecutor(max_workers=max(len(routers), 1)) as pool:
        up = pool.map(lambda h: answers_hello(h, timeout_s, options=options), routers)
        return {h: ROUTER if ok else DOWN for h, ok in zip(routers, up, strict=True)}


def resolve(
    selection: Selection,
    states: dict[str, str],
    layout: ShardedLayout | None = None,
    placed: Sequence[Placement] = (),
) -> list[str]:
    """The hosts a selection names, given every member's current state (in config order); of
    a sharded target (`layout`), routers' too (ROUTER or DOWN); by domain, where each member
    is (`placed`)."""
    if isinstance(selection, SelectDomain):
        return _resolve_domain(selection, states, placed)
    if isinstance(selection, SelectShard | SelectRouter) or selection == "config-primary":
        if layout is None:
            raise SelectionError(f"select {describe_selection(selection)}: not a sharded target")
        return _resolve_sharded(selection, states, layout)
    if isinstance(selection, SelectMember):
        if selection.member not in states:
            raise SelectionError(f"{selection.member} is not a member ({', '.join(states)})")
        return [selection.member]
    if isinstance(selection, SelectCount):
        pool = [h for h, s in states.items() if _fits(s, selection.role)]
        # The primary last: counting members down should hit secondaries first.
        pool.sort(key=lambda h: states[h] == "PRIMARY")
        if len(pool) < selection.count:
            raise SelectionError(
                f"select count {selection.count} ({selection.role}): only "
                f"{len(pool)} such member(s): {_describe(states)}"
            )
        return pool[: selection.count]
    wanted = selection.upper()
    # `primary` is the member that takes the writes: a standalone server is one.
    accepted = PRIMARY_LIKE if wanted == "PRIMARY" else {wanted}
    matches = [h for h, s in states.items() if s in accepted]
    if not matches:
        raise SelectionError(f"select {selection}: no member is {wanted} now: {_describe(states)}")
    return matches[:1]


def placements_for(selection: Selection, target: RunTarget) -> list[Placement]:
    """Where each member is when `selection` is by domain: its replica-set tags, the zone and
    region its platform knows it in instead, the platform's tags over its own."""
    return member_placements(target) if isinstance(selection, SelectDomain) else []


def member_placements(target: RunTarget) -> list[Placement]:
    """Where each member is: its replica-set tags (each set's config places its own members:
    a sharded target has several), the zone and region its platform knows it in instead."""
    tagged = [p for hosts in replica_sets(target).values()
              for p in read_placements(hosts, 1.0, options=target.connect_options)]  # fmt: skip
    return placed_by_platform(tagged, platform_places(target))


def concrete_domain(
    domain: SelectDomain, states: dict[str, str], placed: Sequence[Placement]
) -> SelectDomain:
    """The domain a selection names now: a zone named by what its loss costs is the primary's
    when it fits (`SelectDomain.among`)."""
    primary = next((h for h, s in states.items() if s == "PRIMARY"), None)
    try:
        return domain.among(placed, primary)
    except ValueError as exc:
        raise SelectionError(f"select {domain}: {exc}") from None


def _resolve_domain(
    domain: SelectDomain, states: dict[str, str], placed: Sequence[Placement]
) -> list[str]:
    """Every member of the domain that is not down already."""
    domain = concrete_domain(domain, states, placed)
    inside = {p.host for p in placed if domain.matches(p)}
    held = [h for h in states if h in inside]
    if not held:
        raise SelectionError(f"no member is in {domain} ({domains_held(placed, domain.key)})")
    up = [h for h in held if states[h] != DOWN]
    if not up:
        raise SelectionError(f"every member of {domain} is down: "
                             f"{_describe({h: states[h] for h in held})}")  # fmt: skip
    return up


def _resolve_sharded(
    selection: Selection, states: dict[str, str], layout: ShardedLayout
) -> list[str]:
    if isinstance(selection, SelectRouter):
        up = [h for h in layout.routers if states.get(h) == ROUTER]
        if len(up) < selection.mongos:
            seen = {h: states.get(h, "?") for h in layout.routers}
            raise SelectionError(f"select {selection.mongos} router(s): only {len(up)} up: "
                                 f"{_describe(seen)}")  # fmt: skip
        return up[: selection.mongos]
    if isinstance(selection, SelectShard):
        role: Selection = selection.role
        names = list(layout.shards) if selection.shard == "any" else [selection.shard]
    else:
        role, names = "primary", [CONFIG]
    sets, missed = layout.sets(), []
    for name in names:
        if name not in sets:
            raise SelectionError(f"no shard {name!r} ({', '.join(layout.shards)})")
        try:
            return resolve(role, {h: states[h] for h in sets[name] if h in states})
        except SelectionError as exc:
            missed.append(f"{name}: {exc}")
    raise SelectionError(f"select {describe_selection(selection)}: {'; '.join(missed)}")


def lands_in(
    fault: Fault, name: str, layout: ShardedLayout, placed: Sequence[Placement] = ()
) -> bool:
    """Whether `fault` can act on a member of the set `name` (`layout.sets()`'s names); a
    domain, on those of its members `placed` puts in it."""
    sel = fault.select
    if isinstance(sel, SelectDomain):
        hosts = set(layout.sets()[name])
        return any(p.host in hosts and sel.matches(p) for p in placed)
    if isinstance(sel, SelectShard):
        return sel.shard in (name, "any") and name in layout.shards
    if isinstance(sel, SelectMember):
        return layout.set_of(sel.member) == name
    return sel == "config-primary" and name == CONFIG


def _fits(state: str, role: str) -> bool:
    if role == "secondary":
        return state == "SECONDARY"
    if role == "data":
        return state not in ("ARBITER", "DOWN")
    return state != "DOWN"


def _describe(states: dict[str, str]) -> str:
    return ", ".join(f"{h} {s}" for h, s in states.items())


def roles_now(
    target: RunTarget,
    layout: ShardedLayout | None,
    probe: FailoverProbe | None,
    hellos_since: Callable[[float], list[Op]],
    changed_s: float,
    now_s: float,
) -> dict[str, str]:
    """Each member's state, for `select:`: from the failover probe's hello answers since the
    last fault changed anything (`changed_s`), so the fault goes in on time (asking a frozen
    member live takes its whole timeout); asked live when the probe has no fresh answer.
    `hellos_since(t)`: the probe's attempts that ended at `t` or later."""
    routers = router_states(layout, options=target.connect_options)
    if probe is not None:
        # A streamed hello is current until its wait (max_await + timeout) runs out.
        max_age_s = probe.max_await + probe.timeout + 2 * probe.interval + 0.1
        states = states_from_hellos(
            # Only answers that can count (ended since, and fresh): not hours of polls.
            hellos_since(max(changed_s, now_s - max_age_s)),
            target.members,
            since_s=changed_s,
            now_s=now_s,
            max_age_s=max_age_s,
        )
        if states is not None:
            return {**states, **routers}
    return {**current_states(target.members, options=target.connect_options), **routers}


def states_from_hellos(
    ops: list[Op], members: list[str], *, since_s: float, now_s: float, max_age_s: float
) -> dict[str, str] | None:
    """Every member's role from the failover probe's latest hello, or None if one is unknown.

    This costs no network round trip at injection time (a frozen member makes the live query
    wait out its timeout). An answer counts only when it describes the member after `since_s`
    (the last fault injected or reverted, which may have changed the roles; see
    `_describes_after`) and ended within `max_age_s` of `now_s`; a hello that failed is DOWN,
    as in `member_state`. An answer that names no role (a primary still draining, a member
    starting up) leaves the member unknown.
    """
    latest: dict[str, Op] = {}
    for answer in ops:
        if answer.op == "hello" and answer.member in members and _describes_after(answer, since_s):
            latest[answer.member] = answer  # ops are in the order they ended: the last one wins
    states = {}
    for host in members:
        op = latest.get(host)
        if op is None or now_s - op.t_end > max_age_s:
            return None
        if not op.ok:
            states[host] = "DOWN"
        elif op.detail.get("writable"):
            states[host] = "PRIMARY"
        elif op.detail.get("secondary"):
            states[host] = "SECONDARY"
        elif op.detail.get("arbiter"):
            states[host] = "ARBITER"
        else:
            return None
    return states


def _describes_after(op: Op, since_s: float) -> bool:
    """Whether a hello op tells the member's state after `since_s`. A polled answer may have
    been read before it unless it was asked after it. An awaited answer is read when it is sent
    (at once on a change, else after maxAwaitTimeMS), and a member that did not answer did not
    answer at the op's end: both tell the state as of their end. (Waiting for a frozen member's
    awaited hello that started after the fault delays the next fault by max_await + timeout.)"""
    if op.ok and not op.detail.get("awaited"):
        return op.t_start > since_s
    return op.t_end > since_s


def layout_of(target: RunTarget) -> ShardedLayout | None:
    """A sharded target's sets and routers (None: the target is one replica set)."""
    layout = getattr(target, "layout", None)
    return layout if isinstance(layout, ShardedLayout) else None


def replica_sets(target: RunTarget) -> dict[str, list[str]]:
    """The target's replica sets' members by set: one unnamed set unless it is sharded."""
    layout = layout_of(target)
    if layout is None:
        return {"": list(target.members)}
    return {name: list(hosts) for name, hosts in layout.sets().items()}


def recovered(states: Mapping[str, str], sets: Mapping[str, list[str]]) -> bool:
    """Every member healthy (a sharded target's routers, when given, answering), and each
    replica set with a primary."""
    return all(s in HEALTHY or s == ROUTER for s in states.values()) and all(
        any(states.get(h) in PRIMARY_LIKE for h in hosts) for hosts in sets.values()
    )
