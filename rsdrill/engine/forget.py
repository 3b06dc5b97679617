"""Giving up one owed revert by hand: `rsdrill recover --forget KEY`.

A revert whose member does not answer stays owed, and `recover` exits 4 until it succeeds; for
a member gone for good (a decommissioned VM, a deleted pod) it never will. The operator names
the revert and the journal gets a `forgotten` record (by whom; the record's `at` says when):
what was given up stays on the record, nothing is deleted. Nothing is reverted here.

KEY is the journal's key for it (`fault:0:10.0.0.5:27017`), as `recover` shows it in brackets,
or `RUN/KEY` when more than one unfinished journal owes that key (every run of a nightly
experiment journals the same keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsdrill.engine.journal import (
    FORGOTTEN,
    SETTLED,
    Journal,
    Pending,
    journal_dir,
    journal_paths,
    process_alive,
    read_records,
    unfinished,
)


class ForgetRefused(Exception):
    """KEY names no revert that may be given up (unknown, ambiguous, its run alive): one line."""


@dataclass(frozen=True)
class Owed:
    """One revert an unfinished journal owes."""

    pending: Pending
    key: str
    action: dict[str, Any]


def owed_reverts(among: list[Pending]) -> list[Owed]:
    return [Owed(p, key, action) for p in among for key, action in p.actions]


def handle(owed: Owed, among: list[Owed]) -> str:
    """What to give --forget for `owed`: its key, qualified by its run when another owes it."""
    shared = sum(o.key == owed.key for o in among) > 1
    return f"{owed.pending.run}/{owed.key}" if shared else owed.key


def _names(ident: str, run: str, key: str) -> bool:
    return ident in (key, f"{run}/{key}")


def find(ident: str, among: list[Pending], force: bool = False) -> Owed | None:
    """The one revert `ident` names among those owed (None: none is). Refused when it names
    more than one, or one whose run still seems alive (its own rollback reverts it) without
    `force`."""
    everything = owed_reverts(among)
    found = [o for o in everything if _names(ident, o.pending.run, o.key)]
    if len(found) > 1:
        choices = ", ".join(handle(o, everything) for o in found)
        raise ForgetRefused(f"--forget {ident}: owed by {len(found)} runs; name one: {choices}")
    if not found:
        return None
    owed = found[0]
    if not force and process_alive(owed.pending.pid):
        raise ForgetRefused(
            f"--forget {ident}: run {owed.pending.run} is still running as pid "
            f"{owed.pending.pid} and reverts it itself; use --force to forget it anyway"
        )
    return owed


def unknown(ident: str, among: list[Pending], directory: Path | None = None) -> str:
    """The refusal for a key nothing owes: what is owed instead, or that nothing is."""
    everything = owed_reverts(among)
    if not everything:
        where = directory or journal_dir()
        return f"--forget {ident}: no such revert owed: nothing is owed (journals in {where})"
    keys = ", ".join(h if "/" in (h := handle(o, everything)) else f"{h} (run {o.pending.run})"
                     for o in everything)  # fmt: skip
    return f"--forget {ident}: no such revert owed; owed: {keys}"


def settled(ident: str, directory: Path | None = None) -> str | None:
    """How the newest revert `ident` names stopped being owed (reverted, released, forgotten:
    by whom, when), in words; None if no journal ever owed it."""
    for path in reversed(journal_paths(directory)):
        records = read_records(path)
        run = next((r.get("run", path.stem) for r in records if r["type"] == "run"), path.stem)
        done = [r for r in records if r["type"] in SETTLED and _names(ident, run, r["key"])]
        if done:
            last = done[-1]
            by = f" by {last['by']}" if last.get("by") else ""
            return f"{last['key']} (run {run}): already {last['type']}{by} at {last['at']}"
    return None


def forget(owed: Owed, by: str, wait_s: float = 0.0,
           say: Callable[[str], None] = lambda line: None) -> list[str] | None:  # fmt: skip
    """Journal `owed` as given up by `by`; the keys its journal still owes. None left: `end`
    is written too, and `recover` passes the journal by from now on. None instead of a list:
    read again under the journal's lock (`Journal.lock`: `wait_s`, `say`; JournalBusy), it
    was owed no more (a recover reverted it meanwhile, or another forget gave it up), and
    nothing is written."""
    journal = Journal(owed.pending.path, create=False)
    try:
        journal.lock(wait_s, say)
        now = unfinished(owed.pending.path)
        if now is None or owed.key not in dict(now.actions):
            return None
        journal.write(FORGOTTEN, key=owed.key, by=by)
        rest = [key for key, _ in now.actions if key != owed.key]
        if not rest:
            journal.write("end", verdict=FORGOTTEN)
        return rest
    finally:
        journal.close()
