"""`guards: {stop_balancer: true}`: a sharded cluster's balancer stopped for the run and restored.

After the guards pass and before the probes and the first fault, the balancer's state is read
through a router (`balancerStatus`). Mode `full` (balancing): the run journals the restart it
will owe (a `resource`, as a sandbox or a step is, so `rsdrill recover` restarts it after a
crash), then runs `balancerStop` (MongoDB's waits for the round in progress to end), and checks
the mode is `off`. Any other mode (`off`; `autoSplitOnly`, MongoDB before 6.1 splitting without
moving chunks) moves no chunk already: it is left as it is, and not restarted after the run.

At the end of the run, whatever ended it (success, failure, an error, Ctrl-C, SIGTERM), once the
faults are reverted, `balancerStart` gives the balancer back, only if this run stopped it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from rsdrill.connection import (
    ConnectOptions,
    DirectConnection,
    SettingsError,
    WireClientError,
    action_options,
)
from rsdrill.engine.journal import Journal
from rsdrill.errors import GuardRefusal
from rsdrill.layout import ShardedLayout
from rsdrill.platforms.base import TargetError
from rsdrill.redact import redact_uri
from rsdrill.result import BalancerHeld

REVERT_ACTION = "balancer-start"
KEY = "resource:balancer"
STATUS_TIMEOUT_S = 5.0
# balancerStop waits for the balancer's round in progress (mongos's default maxTimeMS, 60 s).
CONTROL_TIMEOUT_S = 70.0


class BalancerError(Exception):
    """No router answered the command, or one refused it (the message says which)."""


def router_command(
    routers: Sequence[str], options: ConnectOptions, cmd: dict[str, Any], timeout_s: float
) -> tuple[str, dict[str, Any]]:
    """`cmd` on the first router that answers: (that router, its ok reply); BalancerError when
    none answers or it refuses."""
    name, unreachable = next(iter(cmd)), []
    for router in routers:
        conn = DirectConnection(router, timeout_s, options)
        try:
            reply = conn.command("admin", cmd)
        except WireClientError as exc:
            unreachable.append(str(exc))
            continue
        finally:
            conn.close()
        if not reply.get("ok"):
            why = reply.get("errmsg") or reply
            raise BalancerError(redact_uri(f"{name} on router {router}: {why}"))
        return router, reply
    why = "; ".join(unreachable) or "none known"
    raise BalancerError(redact_uri(f"no router answered {name}: {why}"))


class BalancerHold:
    """The run's hold on the balancer: `stop` before the faults, `restore` after them."""

    def __init__(self, wanted: bool, event: Callable[[str], None]) -> None:
        self.wanted = wanted
        self.event = event
        self.held: BalancerHeld | None = None
        self._routers: tuple[str, ...] = ()
        self._options = ConnectOptions()
        self._owed = False  # this run stopped it (or may have): balancerStart is owed

    def stop(self, layout: ShardedLayout | None, options: ConnectOptions, journal: Journal) -> None:
        """Stop the balancer if the experiment asks and it is on; GuardRefusal when its state
        cannot be read or it does not stop (nothing is injected then)."""
        if not self.wanted or layout is None:
            return
        self._routers, self._options = layout.routers, options
        try:
            router, status = router_command(self._routers, options, {"balancerStatus": 1},
                                            STATUS_TIMEOUT_S)  # fmt: skip
        except BalancerError as exc:
            raise GuardRefusal("balancer", f"guards.stop_balancer: {exc}") from exc
        mode = str(status.get("mode", "?"))
        self.held = BalancerHeld(mode_before=mode, router=router)
        if mode != "full":
            self.event(f"balancer: mode {mode} before the run ({router}): it moves no chunk, "
                       "left as it is and not restarted after the run")  # fmt: skip
            return
        journal.write("resource", key=KEY, revert=self.revert_action())
        self._owed = True  # from here: a stop that half happened is undone too
        try:
            router, _ = router_command(self._routers, options, {"balancerStop": 1},
                                       CONTROL_TIMEOUT_S)  # fmt: skip
            _, after = router_command(self._routers, options, {"balancerStatus": 1},
                                      STATUS_TIMEOUT_S)  # fmt: skip
        except BalancerError as exc:
            raise GuardRefusal("balancer", f"guards.stop_balancer: {exc}") from exc
        if after.get("mode") != "off":
            raise GuardRefusal("balancer", f"guards.stop_balancer: balancerStop on {router} "
                               f"answered ok, but the mode is {after.get('mode')!r}")  # fmt: skip
        self.held.stopped_at = _now()
        self.event(f"balancer: mode {mode} before the run: stopped (balancerStop on {router}) "
                   "until the faults are reverted")  # fmt: skip

    def revert_action(self) -> dict[str, Any]:
        """What `rsdrill recover` does if the run dies with the balancer stopped."""
        return {"action": REVERT_ACTION, "routers": list(self._routers),
                "connect": self._options.journaled()}  # fmt: skip

    def restore(self, journal: Journal) -> str | None:
        """balancerStart if this run stopped the balancer; the failure's message, if any (the
        journal then still owes it to `rsdrill recover`)."""
        if not self._owed:
            return None
        try:
            router, _ = router_command(self._routers, self._options, {"balancerStart": 1},
                                       CONTROL_TIMEOUT_S)  # fmt: skip
        except (BalancerError, SettingsError, OSError) as exc:
            self.event(f"balancer: not restarted: {exc}")
            return f"balancer not restarted (run `rsdrill recover`): {exc}"
        journal.write("released", key=KEY)
        self._owed = False
        if self.held is not None:
            self.held.restored_at = _now()
        self.event(f"balancer: started again (balancerStart on {router})")
        return None


def balancer_start(action: dict[str, Any]) -> str:
    """Revert action `balancer-start`: balancerStart through the first router that answers."""
    routers = [str(r) for r in action["routers"]]
    try:
        router, _ = router_command(routers, action_options(action, login=True),
                                   {"balancerStart": 1}, CONTROL_TIMEOUT_S)  # fmt: skip
    except (BalancerError, SettingsError) as exc:
        raise TargetError(f"the balancer may still be off: {exc}") from exc
    return f"balancer started again (balancerStart on {router})"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()
