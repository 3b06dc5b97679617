"""The run's last phase: measuring recovery after the last revert, until every member (and
router) is healthy again, or `observe.after_revert` at most."""

from __future__ import annotations

from collections.abc import Callable

from rsdrill.engine.selection import current_states, recovered, replica_sets, router_states
from rsdrill.experiment.schema import Experiment
from rsdrill.history import History, Op, RunClock
from rsdrill.layout import ShardedLayout
from rsdrill.platforms.base import RunTarget

# The least observation after the last revert, even when every member already looks healthy.
MIN_OBSERVE_S = 2.0


def observe(exp: Experiment, target: RunTarget, clock: RunClock, history: History,
            layout: ShardedLayout | None, sleep: Callable[[float], None]) -> None:  # fmt: skip
    """Wait until every member is healthy again, or `after_revert` at most."""
    start = clock.now()
    while True:
        elapsed = clock.now() - start
        if elapsed >= exp.observe.after_revert:
            return
        if exp.observe.until_recovered and elapsed >= MIN_OBSERVE_S:
            states = _recovered_states(exp, target, history, start)
            routers = router_states(layout, options=target.connect_options)
            if states and recovered({**states, **routers}, replica_sets(target)):
                return
        sleep(0.25)


def _recovered_states(exp: Experiment, target: RunTarget, history: History, since_s: float
                      ) -> dict[str, str] | None:  # fmt: skip
    """Every member's state as the recovery probe last recorded it since `since_s` (None
    until each has such a poll): the run may end only once the history the analyzer reads
    holds the recovery, not when a separate query sees it first. Without the recovery
    probe, the members are asked directly."""
    if exp.probes.recovery is None:
        return current_states(target.members, timeout_s=0.5, options=target.connect_options)
    from rsdrill.analysis.recovery import polled_state

    latest: dict[str, Op] = {}
    for op in history.ops("recovery", since_s=since_s):
        if op.member in target.members and op.t_start >= since_s:
            latest[op.member] = op
    if len(latest) < len(target.members):
        return None
    return {host: polled_state(op) for host, op in latest.items()}
