"""Client rediscovery after a failover, as pymongo's own monitor sees it, beside the SDAM spec.

An rs3 sandbox; two pymongo clients watch it, each writing (w:1) every 20 ms as rsdrill's probes
do: one with its monitor streaming (the awaitable hello of MongoDB 4.4+, pymongo's default) and
one polling (`serverMonitoringMode=poll`, what a client does against a server without
`topologyVersion`). For a graceful stepdown (`replSetStepDown`), a SIGKILL and a SIGSTOP
(freeze) of the primary, it prints per trial, from CLOCK_MONOTONIC (shared with the members'
event logs):

- writable: fault → the new primary's `writable` event (its own log: the ground truth);
- seen: the new primary `writable` → the client's monitor gets the hello in which it says so
  (ServerHeartbeatSucceededEvent): the client-rediscovery part of a failover;
- write: `writable` → the client's first acknowledged write after the fault;
- awaited: whether the heartbeat that told the streaming client was an awaited one (pymongo's
  ServerHeartbeatSucceededEvent.awaited): the proof that it streamed;
- detected (kill, freeze): fault → the client's monitor fails a check of the old primary;
- elections, when more than one: the new primary was deposed before the clients found it (with
  a 1 s election timeout and 2 s heartbeats, a primary whose only contact with a secondary is
  heartbeats cannot keep a majority in sight: after a freeze the other secondary keeps fetching
  from the frozen member until its fetch times out). Seen and write are then timed against the
  primary that stands, from when it became writable, and the members' events are printed.

What the SDAM spec leads one to expect: a streaming monitor learns of the new primary in about
one round trip (the member answers the pending awaitable hello the moment its topologyVersion
changes), so `seen` is a few ms after a stepdown and after a kill alike; a polling monitor learns
at its next check: an error-triggered re-check (no sooner than minHeartbeatFrequencyMS, 500 ms,
after the last) or its heartbeatFrequencyMS (10 s). A killed member is detected only by the
error its monitor's connection gets (at once: the kernel resets the sockets of a killed
process). A frozen one (as a powered-off host or a partition) resets nothing: only timeouts
tell, and a streaming monitor's awaited hello times out only after connectTimeoutMS +
heartbeatFrequencyMS (11 s here), a polling one's check after connectTimeoutMS (1 s) — while
the new primary is still heard of in a round trip, which is what makes the old one Unknown.

    python bench/rediscovery.py [--trials 3] [--election-timeout 10000] [--port-base 29340]
                                [--faults stepdown,kill,freeze] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pymongo import MongoClient, monitoring
from pymongo.errors import PyMongoError

from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology, member_dir
from rsdrill.sandbox.groundtruth import read_events

MODES = ("stream", "poll")
FAULTS = ("stepdown", "kill", "freeze")
WRITE_INTERVAL_S = 0.02
WAIT_S = 60.0


def _address(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


class Watcher(monitoring.ServerHeartbeatListener):
    """One client's view over time: its monitor's heartbeats and its acknowledged writes.

    Heartbeat events are published on the monitor's thread as the reply arrives, just before
    the topology takes it in; pymongo queues server-description events for a thread that runs
    once a second, too late to time anything by."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # (t, member, awaited, isWritablePrimary); failed: (t, member)
        self.heartbeats: list[tuple[float, str, bool, bool]] = []
        self.failures: list[tuple[float, str]] = []
        self.writes: list[float] = []
        # member -> whether its monitor's newest check is an awaitable hello still pending
        self.awaiting: dict[str, bool] = {}

    def started(self, event: monitoring.ServerHeartbeatStartedEvent) -> None:
        with self.lock:
            self.awaiting[_address(event.connection_id)] = event.awaited

    def succeeded(self, event: monitoring.ServerHeartbeatSucceededEvent) -> None:
        writable = bool(event.reply.document.get("isWritablePrimary"))
        with self.lock:
            self.heartbeats.append(
                (time.monotonic(), _address(event.connection_id), event.awaited, writable)
            )
            self.awaiting[_address(event.connection_id)] = False

    def failed(self, event: monitoring.ServerHeartbeatFailedEvent) -> None:
        with self.lock:
            self.failures.append((time.monotonic(), _address(event.connection_id)))
            self.awaiting[_address(event.connection_id)] = False

    def revealing_heartbeat(self, member: str, after: float) -> tuple[float, bool] | None:
        """The first heartbeat after `after` in which `member` said it is writable primary:
        when the client learns of it, and whether the monitor was streaming (awaited)."""
        with self.lock:
            return next(((t, awaited) for t, m, awaited, w in self.heartbeats
                         if m == member and w and t > after), None)  # fmt: skip

    def first_failure(self, member: str, after: float) -> float | None:
        with self.lock:
            return next((t for t, m in self.failures if m == member and t > after), None)

    def first_write(self, after: float) -> float | None:
        with self.lock:
            return next((t for t in self.writes if t > after), None)

    def streams_from(self, members: list[str]) -> bool:
        """Whether the monitor has an awaitable hello pending at every member now (its newest
        check of each began as an awaited one). Waiting instead for an awaited reply took up to
        heartbeatFrequencyMS (10 s) per trial while nothing changed."""
        with self.lock:
            return all(self.awaiting.get(m, False) for m in members)


@dataclass
class Trial:
    fault: str
    old: str
    new: str
    writable_s: float
    # Per client mode: new primary writable → seen as RSPrimary / first acknowledged write.
    seen_s: dict[str, float | None] = field(default_factory=dict)
    write_s: dict[str, float | None] = field(default_factory=dict)
    # Fault → the killed member marked Unknown.
    detected_s: dict[str, float | None] = field(default_factory=dict)
    stream_awaited: bool | None = None
    # Primaries made writable while the clients looked (more than one: the new one was deposed).
    elections: int = 1


class Clients:
    """The two watching clients, each with a writer thread."""

    def __init__(self, uri: str) -> None:
        self.watchers = {mode: Watcher() for mode in MODES}
        self.clients: dict[str, MongoClient[Any]] = {
            mode: MongoClient(
                uri,
                serverMonitoringMode=mode,
                event_listeners=[watcher],
                serverSelectionTimeoutMS=500,
                socketTimeoutMS=1000,
                connectTimeoutMS=1000,
                retryWrites=False,
                w=1,  # rediscovery alone: not held up by replication (the default is majority)
            )
            for mode, watcher in self.watchers.items()
        }
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(m,), daemon=True) for m in MODES]
        for thread in self.threads:
            thread.start()

    def _write(self, mode: str) -> None:
        collection = self.clients[mode].bench.rediscovery
        while not self.stop.is_set():
            try:
                collection.insert_one({"mode": mode})
                self.watchers[mode].writes.append(time.monotonic())
            except PyMongoError:
                pass
            self.stop.wait(WRITE_INTERVAL_S)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        for client in self.clients.values():
            client.close()


def _wait(what: str, predicate: Any, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def _hello(host: str) -> dict[str, Any]:
    with MongoClient(host, directConnection=True, serverSelectionTimeoutMS=300) as client:
        return client.admin.command("hello")


def _primary(sandbox: Sandbox) -> str | None:
    for member in sandbox.spec.members:
        try:
            if _hello(member.host).get("isWritablePrimary"):
                return member.host
        except PyMongoError:
            continue
    return None


def _writable_events(sandbox: Sandbox, after: float) -> list[tuple[float, str]]:
    """Every `writable` event the members logged after `after`, oldest first."""
    found = []
    for member in sandbox.spec.members:
        events = read_events(member_dir(sandbox.directory, member) / "events.jsonl")
        found += [(e["t_mono"], member.host) for e in events
                  if e["event"] == "writable" and e["t_mono"] > after]  # fmt: skip
    return sorted(found)


def one_trial(sandbox: Sandbox, clients: Clients, fault: str) -> Trial:
    """Settle (a primary every client knows, the streaming monitor streaming from every
    member), apply the fault, and measure until both clients have found the new primary."""
    hosts = [m.host for m in sandbox.spec.members]
    old = _wait("a writable primary", lambda: _primary(sandbox))
    settled = time.monotonic()
    stream = clients.watchers["stream"]
    _wait("an awaited hello pending at every member", lambda: stream.streams_from(hosts))
    for watcher in clients.watchers.values():
        _wait("a write", lambda w=watcher: w.first_write(settled))
    started = time.monotonic()
    member = sandbox.spec.member(old)
    if fault == "stepdown":
        with MongoClient(old, directConnection=True) as client:
            client.admin.command("replSetStepDown", 10, secondaryCatchUpPeriodSecs=5)
    elif fault == "kill":
        sandbox.kill(member)
    else:
        sandbox.stop(member)  # SIGSTOP: no error, no reset; only timeouts tell
    writable_at = _wait("the new primary's writable event",
                        lambda: _writable_events(sandbox, started))[0][0]  # fmt: skip
    trial = Trial(fault, old, "", writable_at - started)
    for mode, watcher in clients.watchers.items():
        try:
            heard = _wait(f"the {mode} client to hear the new primary",
                          lambda w=watcher: _heard(sandbox, w, started))  # fmt: skip
        except TimeoutError as error:
            raise TimeoutError(f"{error}; {_story(sandbox, watcher, started)}") from None
        new, since, seen, awaited = heard
        wrote = _wait(f"a {mode} write", lambda w=watcher, t=since: w.first_write(t))
        trial.new = new
        trial.seen_s[mode] = seen - since
        trial.write_s[mode] = wrote - since
        if mode == "stream":
            trial.stream_awaited = awaited
        if fault != "stepdown":
            try:
                failed = _wait(f"a failed check of {old}",
                               lambda w=watcher: w.first_failure(old, started))  # fmt: skip
                trial.detected_s[mode] = failed - started
            except TimeoutError:
                trial.detected_s[mode] = None
    trial.elections = len(_writable_events(sandbox, started))
    if trial.elections > 1:
        print(_story(sandbox, clients.watchers["poll"], started))
    if fault == "stepdown":
        # Eligible again at once: otherwise the next trial's election waits out the freeze.
        with MongoClient(old, directConnection=True) as client:
            client.admin.command("replSetFreeze", 0)
    elif fault == "kill":
        sandbox.start(member)
    else:
        sandbox.cont(member)
    _wait(f"{old} back as SECONDARY", lambda: _secondary(old))
    return trial


def _heard(
    sandbox: Sandbox, watcher: Watcher, after: float
) -> tuple[str, float, float, bool] | None:
    """The primary standing now, when it became writable, and when (and whether by an awaited
    heartbeat) the client heard so. A second election after the fault (a loaded machine can
    depose the new primary within a short election timeout) moves the target: the client is
    timed against the primary it must find, from when that one became writable."""
    events = _writable_events(sandbox, after)
    if not events:
        return None
    since, host = events[-1]
    heard = watcher.revealing_heartbeat(host, since)
    return None if heard is None else (host, since, *heard)


_EVENT_KEYS = {"t_mono", "t_wall", "member", "event"}


def _story(sandbox: Sandbox, watcher: Watcher, after: float) -> str:
    """What each member logged and what the client heard since `after`, for a trial that hung."""
    lines = []
    for member in sandbox.spec.members:
        events = read_events(member_dir(sandbox.directory, member) / "events.jsonl")
        lines += [f"{e['t_mono'] - after:8.3f} {member.host} {e['event']} "
                  + " ".join(f"{k}={v}" for k, v in e.items() if k not in _EVENT_KEYS)
                  for e in events if e["t_mono"] > after]  # fmt: skip
    with watcher.lock:
        lines += [f"{t - after:8.3f} client heard {m} writable={w} awaited={a}"
                  for t, m, a, w in watcher.heartbeats if t > after][-30:]  # fmt: skip
    return "since the fault:\n" + "\n".join(sorted(lines))


def _secondary(host: str) -> bool:
    try:
        return bool(_hello(host).get("secondary"))
    except PyMongoError:
        return False


def run(
    trials: int, election_timeout_ms: int, port_base: int, faults: tuple[str, ...] = FAULTS
) -> list[Trial]:
    spec = build_topology(
        "rs3", port_base=port_base, settings=Settings(election_timeout_ms=election_timeout_ms)
    )
    rows: list[Trial] = []
    with tempfile.TemporaryDirectory(prefix="rsdrill-rediscovery-") as tmp:
        sandbox = up(Path(tmp) / "sandbox", spec, EmulatorEngine())
        clients = Clients(sandbox.uri)
        try:
            for fault in faults:
                for i in range(trials):
                    trial = one_trial(sandbox, clients, fault)
                    rows.append(trial)
                    print(_row(i + 1, trial), flush=True)
        finally:
            clients.close()
            sandbox.down()
    return rows


def _ms(value: float | None) -> str:
    return "   -   " if value is None else f"{1000 * value:7.1f}"


def _row(n: int, t: Trial) -> str:
    detected = "".join(f"  detected[{m}] {_ms(t.detected_s.get(m))} ms" for m in t.detected_s)
    return (f"{t.fault:8s} {n}: writable {t.writable_s:6.2f} s  "
            + "  ".join(f"seen[{m}] {_ms(t.seen_s[m])} ms  write[{m}] {_ms(t.write_s[m])} ms"
                        for m in MODES)
            + f"  awaited {t.stream_awaited}{detected}"
            + (f"  ({t.elections} elections)" if t.elections > 1 else ""))  # fmt: skip


def summary(rows: list[Trial]) -> list[str]:
    lines = []
    for fault in FAULTS:
        for mode in MODES:
            for key in ("seen_s", "write_s", "detected_s"):
                values = sorted(v for r in rows if r.fault == fault
                                for v in [getattr(r, key).get(mode)] if v is not None)  # fmt: skip
                if values:
                    lines.append(
                        f"{fault:8s} {mode:6s} {key[:-2]:8s} median "
                        f"{_ms(statistics.median(values))} ms  min {_ms(values[0])}  "
                        f"max {_ms(values[-1])}  (n={len(values)})"
                    )
    awaited = [r.stream_awaited for r in rows]
    lines.append(
        f"streaming client told by an awaited heartbeat: {awaited.count(True)}/{len(rows)}"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3, help="per fault")
    parser.add_argument("--election-timeout", type=int, default=10_000)
    parser.add_argument("--port-base", type=int, default=29340)
    parser.add_argument("--faults", default=",".join(FAULTS), help="some of " + ",".join(FAULTS))
    parser.add_argument("--json", type=Path, help="write the trials here")
    args = parser.parse_args()
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    if not faults or set(faults) - set(FAULTS):
        parser.error(f"--faults: choose from {', '.join(FAULTS)}")
    rows = run(args.trials, args.election_timeout, args.port_base, faults)
    print("\n".join(summary(rows)))
    print("SDAM expectation: streaming hears of the new primary about one round trip after it "
          "is writable, whatever the fault; polling at its next check (>= 500 ms after an "
          "error-triggered one, else the 10 s heartbeat); a killed primary is detected by the "
          "error at once, a frozen one only by a timeout (streaming: connectTimeoutMS + "
          "heartbeatFrequencyMS after the awaited hello began; polling: connectTimeoutMS after "
          "its next check)")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")


if __name__ == "__main__":
    main()
