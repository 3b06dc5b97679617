"""guards.stop_balancer's hold (rsdrill/engine/balancer.py) against a scripted router: journaled
before it is stopped, restored only when this run stopped it, refused when it cannot be, owed
to `rsdrill recover` when it cannot be restored; the journal holds no secret."""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rsdrill.connection import ConnectOptions
from rsdrill.engine import balancer
from rsdrill.engine.actions import carry_out
from rsdrill.engine.balancer import KEY, BalancerError, BalancerHold, balancer_start
from rsdrill.engine.journal import Journal, pending, read_records
from rsdrill.errors import GuardRefusal
from rsdrill.layout import ShardedLayout
from rsdrill.platforms.base import TargetError

LAYOUT = ShardedLayout(config=("c:1",), shards={"shard0": ("s:1",)}, routers=("r:1", "r:2"))


class Router:
    """balancerStatus / balancerStop / balancerStart as a router answers them; `refuse`: the
    commands answered ok: 0 (or, as None, by no router at all)."""

    def __init__(self, journal: Path, mode: str = "full") -> None:
        self.journal = journal
        self.mode = mode
        self.sent: list[str] = []
        self.refuse: dict[str, str | None] = {}
        # What the journal held when balancerStop came: journal before apply.
        self.journaled_at_stop: list[dict[str, Any]] = []

    def __call__(
        self, routers: Sequence[str], options: ConnectOptions, cmd: dict[str, Any], t: float
    ) -> tuple[str, dict[str, Any]]:
        name = next(iter(cmd))
        self.sent.append(name)
        if name in self.refuse:
            why = self.refuse[name]
            raise BalancerError(why or f"no router answered {name}")
        if name == "balancerStop":
            self.journaled_at_stop = read_records(self.journal)
            self.mode = "off"
        elif name == "balancerStart":
            self.mode = "full"
        return routers[0], {"ok": 1, "mode": self.mode}


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal.open_run("run1", "x", tmp_path)


@pytest.fixture
def router(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> Router:
    fake = Router(journal.path)
    monkeypatch.setattr(balancer, "router_command", fake)
    return fake


def _hold() -> tuple[BalancerHold, list[str]]:
    events: list[str] = []
    return BalancerHold(True, events.append), events


def test_an_on_balancer_is_journaled_stopped_and_restored(journal: Journal, router: Router) -> None:
    hold, events = _hold()
    hold.stop(LAYOUT, ConnectOptions(), journal)
    assert router.sent == ["balancerStatus", "balancerStop", "balancerStatus"]
    # On disk before balancerStop was sent, with what `rsdrill recover` will do.
    owed = [r for r in router.journaled_at_stop if r.get("key") == KEY]
    assert [r["type"] for r in owed] == ["resource"]
    assert owed[0]["revert"]["action"] == "balancer-start"
    assert owed[0]["revert"]["routers"] == ["r:1", "r:2"]
    assert hold.held is not None and hold.held.mode_before == "full" and hold.held.stopped_at
    assert pending(journal.path.parent)[0].actions == [(KEY, owed[0]["revert"])]
    assert hold.restore(journal) is None
    assert router.mode == "full" and router.sent[-1] == "balancerStart"
    assert hold.held.restored_at is not None
    assert pending(journal.path.parent)[0].actions == []
    assert hold.restore(journal) is None and router.sent.count("balancerStart") == 1
    assert [e.split(":")[0] for e in events] == ["balancer", "balancer"]


@pytest.mark.parametrize("mode", ["off", "autoSplitOnly"])
def test_a_balancer_that_moves_no_chunk_is_left_as_it_is(
    journal: Journal, router: Router, mode: str
) -> None:
    router.mode = mode
    hold, events = _hold()
    hold.stop(LAYOUT, ConnectOptions(), journal)
    assert hold.restore(journal) is None
    assert router.sent == ["balancerStatus"] and router.mode == mode
    assert hold.held is not None and hold.held.mode_before == mode
    assert hold.held.stopped_at is None and hold.held.restored_at is None
    assert not [r for r in read_records(journal.path) if r.get("key") == KEY]
    assert f"mode {mode} before the run" in events[0] and "left as it is" in events[0]


def test_not_asked_or_not_sharded_nothing_is_sent(journal: Journal, router: Router) -> None:
    BalancerHold(False, print).stop(LAYOUT, ConnectOptions(), journal)
    BalancerHold(True, print).stop(None, ConnectOptions(), journal)
    assert router.sent == []


def test_an_unreadable_state_is_refused_before_anything(journal: Journal, router: Router) -> None:
    router.refuse["balancerStatus"] = "balancerStatus on router r:1: not authorized"
    hold, _ = _hold()
    with pytest.raises(GuardRefusal, match=r"guards\.stop_balancer: balancerStatus on router r:1"):
        hold.stop(LAYOUT, ConnectOptions(), journal)
    assert router.sent == ["balancerStatus"]
    assert hold.restore(journal) is None and router.sent == ["balancerStatus"]


def test_a_refused_stop_is_refused_and_still_undone(journal: Journal, router: Router) -> None:
    """A stop that may have half happened (a timeout) is owed a start all the same."""
    router.refuse["balancerStop"] = None
    hold, _ = _hold()
    with pytest.raises(GuardRefusal, match="no router answered balancerStop"):
        hold.stop(LAYOUT, ConnectOptions(), journal)
    assert hold.restore(journal) is None
    assert router.sent[-1] == "balancerStart"


def test_a_failed_restore_is_owed_to_recover(journal: Journal, router: Router) -> None:
    hold, events = _hold()
    hold.stop(LAYOUT, ConnectOptions(), journal)
    router.refuse["balancerStart"] = None
    failure = hold.restore(journal)
    assert failure is not None and "run `rsdrill recover`" in failure
    assert hold.held is not None and hold.held.restored_at is None
    ((key, action),) = pending(journal.path.parent)[0].actions
    assert key == KEY and action["action"] == "balancer-start"
    assert events[-1].startswith("balancer: not restarted")


def test_the_journal_keeps_no_password(journal: Journal, router: Router) -> None:
    options = ConnectOptions.from_uri("mongodb://admin:s3cr3t-pw@r:1/?authSource=admin")
    hold, _ = _hold()
    hold.stop(LAYOUT, options, journal)
    text = journal.path.read_text()
    assert "s3cr3t-pw" not in text and '"password": true' in text
    # From the journal alone, the login cannot be made: recover asks for the URI again.
    (record,) = [r for r in read_records(journal.path) if r.get("key") == KEY]
    with pytest.raises(TargetError, match="rsdrill recover --uri"):
        balancer_start(json.loads(json.dumps(record["revert"])))


def test_recover_tells_a_balancer_it_could_not_reach() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{sock.getsockname()[1]}"
    action = {"action": "balancer-start", "routers": [closed], "connect": {}}
    with pytest.raises(TargetError, match="the balancer may still be off: no router answered"):
        carry_out(action)


def test_the_guard_on_a_target_that_is_not_sharded_is_bad_input(tmp_path: Path) -> None:
    """`rsdrill run` refuses it as it reads the file: one located line, exit 2, nothing built."""
    from typer.testing import CliRunner

    from rsdrill.cli.app import app

    path = Path(__file__).parents[1] / "fixtures" / "invalid" / "stop-balancer-on-rs3.yaml"
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--no-live"])
    assert done.exit_code == 2, done.stdout + done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{path}:9:"), line
    assert "guards.stop_balancer: the balancer is a sharded cluster's" in line
    assert "this one is rs3" in line
    assert not out.exists()
