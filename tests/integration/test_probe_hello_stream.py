"""The failover probe's awaitable hello stream against real emulator members: a quiet member
costs one request per max_await, a change arrives at once, a killed member's stream breaks at
once, a frozen one is given up after max_await + timeout; the recovery poller that follows a
stream asks a quiet member seldom and a changed one at once."""

from __future__ import annotations

import time
from collections.abc import Callable

from rsdrill.history import History, Op, RunClock
from rsdrill.probes.failover import HelloStream
from rsdrill.probes.recovery import QUIET_INTERVALS, StatusPoller
from rsdrill.sandbox.cluster import Sandbox, is_writable_primary
from rsdrill.sandbox.groundtruth import first_after
from tests.harness.members import wait_until

INTERVAL_S = 0.02
TIMEOUT_S = 0.25
MAX_AWAIT_S = 0.5


def _watch(sandbox: Sandbox) -> tuple[History, RunClock, list[HelloStream]]:
    history, clock = History(), RunClock.start()
    streams = [
        HelloStream(
            history,
            clock,
            member=m.host,
            interval_s=INTERVAL_S,
            timeout_s=TIMEOUT_S,
            max_await_s=MAX_AWAIT_S,
            options=sandbox.connect_options,
        )
        for m in sandbox.spec.members
    ]
    for stream in streams:
        stream.start()
    return history, clock, streams


def _is_primary(sandbox: Sandbox, host: str) -> bool:
    return is_writable_primary(host, sandbox.connect_options)


def _streaming(streams: list[HelloStream]) -> None:
    """Wait until every member answered its first hello: each stream now awaits changes."""
    wait_until(lambda: all(s.steady for s in streams), 10, "every member streaming")


def _stop(streams: list[HelloStream]) -> None:
    for stream in streams:
        stream.stop()
    for stream in streams:
        stream.join(MAX_AWAIT_S + TIMEOUT_S + 1)
        stream.close()


def _first(history: History, host: str, after: float, match: Callable[[Op], bool]) -> Op | None:
    return next(
        (
            op
            for op in history.ops("failover")
            if op.member == host and op.t_end > after and match(op)
        ),
        None,
    )


def _writable(op: Op) -> bool:
    return op.ok and op.detail["writable"] is True


def test_a_quiet_set_costs_one_request_per_max_await(replset: Callable[..., Sandbox]) -> None:
    sandbox = replset("rs3")
    history, _, streams = _watch(sandbox)
    try:
        time.sleep(3.0)  # the time under test: what a quiet set costs over 3 s
    finally:
        _stop(streams)
    for member in sandbox.spec.members:
        ops = [op for op in history.ops("failover") if op.member == member.host]
        assert all(op.ok for op in ops)
        # Polling would be 150 requests in 3 s; the stream: the first hello, then one per 0.5 s.
        assert 4 <= len(ops) <= 9, (member.host, len(ops))
        assert all(op.detail.get("awaited") and not op.detail["changed"] for op in ops[1:])


def test_a_change_is_pushed_and_a_kill_breaks_the_stream_at_once(
    replset: Callable[..., Sandbox],
) -> None:
    sandbox = replset("rs3")
    primary = next(m for m in sandbox.spec.members if _is_primary(sandbox, m.host))
    others = [m.host for m in sandbox.spec.members if m != primary]
    history, clock, streams = _watch(sandbox)
    try:
        _streaming(streams)
        killed_at = clock.now()
        sandbox.kill(primary)
        wait_until(
            lambda: (
                _first(history, primary.host, killed_at, lambda op: not op.ok)
                and any(_first(history, h, killed_at, _writable) for h in others)
            ),
            15,
            "the killed member's stream to break and a new primary's to push its change",
        )
    finally:
        _stop(streams)
    broken = _first(history, primary.host, killed_at, lambda op: not op.ok)
    new = [
        _first(history, h, killed_at, lambda op: op.ok and op.detail["writable"]) for h in others
    ]
    pushed = next((op for op in new if op is not None), None)
    assert broken is not None
    # A closed socket, well before max_await: the member held its state (writable) until then.
    assert broken.outcome == "error" and broken.t_end - killed_at < MAX_AWAIT_S / 2
    assert broken.detail["held_writable"] is True
    # The new primary's stream answered because it changed, not because its wait ran out: the
    # reply came right after the member became writable (its own event), however far into the
    # wait that was (CI: 0.50 s into a 0.5 s wait, by chance).
    assert pushed is not None and pushed.detail.get("changed") is True
    writable = first_after(sandbox.directory, "writable", clock.mono0 + killed_at,
                           member=pushed.member)  # fmt: skip
    assert writable is not None
    assert 0 <= pushed.t_end - clock.from_mono(writable["t_mono"]) < MAX_AWAIT_S / 2


def test_a_frozen_member_is_given_up_after_max_await_and_timeout(
    replset: Callable[..., Sandbox],
) -> None:
    sandbox = replset("rs3")
    member = sandbox.spec.members[1]
    history, clock, streams = _watch(sandbox)
    try:
        _streaming(streams)
        frozen_at = clock.now()
        sandbox.stop(member)
        wait_until(
            lambda: _first(history, member.host, frozen_at, lambda op: op.outcome == "timeout"),
            MAX_AWAIT_S + TIMEOUT_S + 5,
            "the frozen member's stream to time out",
        )
        sandbox.cont(member)
    finally:
        _stop(streams)
    timed_out = _first(history, member.host, frozen_at, lambda op: op.outcome == "timeout")
    assert timed_out is not None
    assert timed_out.t_end - frozen_at <= MAX_AWAIT_S + TIMEOUT_S + 0.3
    # A silence proves nothing: no held state is claimed for it.
    assert timed_out.detail["held_writable"] is False


def test_stopping_cuts_an_awaited_hello_short_and_records_nothing_for_it(
    replset: Callable[..., Sandbox],
) -> None:
    """A quiet member holds an awaited hello max_await: a run ending must not wait that long
    for its streams, nor record the cut as the member's error."""
    sandbox = replset("rs1")
    history, clock = History(), RunClock.start()
    stream = HelloStream(history, clock, member=sandbox.spec.members[0].host,
                         interval_s=INTERVAL_S, timeout_s=TIMEOUT_S, max_await_s=30.0,
                         options=sandbox.connect_options)  # fmt: skip
    stream.start()
    try:
        _streaming([stream])
        time.sleep(0.2)  # the awaited hello is now held by the member
        stopped_at = time.monotonic()
        stream.stop()
        stream.join(10.0)
        took = time.monotonic() - stopped_at
    finally:
        stream.stop()
        stream.join(31.0)
        stream.close()
    assert took < 2.0, f"the stream ended {took:.2f} s after stop()"
    assert [op.outcome for op in history.ops("failover")] == ["ok"]


def test_the_recovery_poller_asks_a_quiet_member_seldom_and_a_killed_one_every_interval(
    replset: Callable[..., Sandbox],
) -> None:
    sandbox = replset("rs3")
    member = next(m for m in sandbox.spec.members if not _is_primary(sandbox, m.host))
    history, clock, streams = _watch(sandbox)
    stream = next(s for s in streams if s.member == member.host)
    poller = StatusPoller(history, clock, member=member.host, interval_s=0.1, timeout_s=0.5,
                          options=sandbox.connect_options, watch=stream)  # fmt: skip
    _streaming(streams)  # the member SECONDARY (a set just up may still be syncing it)
    poller.start()
    try:
        time.sleep(3.0)  # the time under test: how often a quiet member is asked over 3 s
        # The kill's moment is known only between these two stamps (on a busy machine the
        # signal can go out a while after the first); polls in flight at the first (one was,
        # on a loaded machine, and met the kill's reset) or started between them are neither.
        kill_asked_at = clock.now()
        sandbox.kill(member)
        killed_at = clock.now()
        time.sleep(1.0)  # the time under test: how often a killed one is asked over 1 s
    finally:
        poller.stop()
        poller.join(2)
        poller.close()
        _stop(streams)
    polls = history.ops("recovery")
    quiet = [op for op in polls if op.t_end < kill_asked_at]
    # Every 0.1 s would be 30; while the member streams unchanged, one per QUIET_INTERVALS.
    assert 2 <= len(quiet) <= 3.0 / (QUIET_INTERVALS * 0.1) + 2, len(quiet)
    assert all(op.ok and op.detail["state"] == "SECONDARY" for op in quiet), [
        (op.outcome, op.detail) for op in quiet
    ]
    down = [op for op in polls if op.t_start >= killed_at]
    # The stream broke at once: from then on every interval (about 10 in 1 s), DOWN at once.
    assert len(down) >= 6 and not down[0].ok and down[0].t_end - killed_at < 0.3, (
        f"kill took {killed_at - kill_asked_at:.3f} s",
        [(round(op.t_start - killed_at, 3), op.outcome) for op in down],
    )
