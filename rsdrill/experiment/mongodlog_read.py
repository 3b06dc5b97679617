"""mongod's structured JSON log (MongoDB 4.4 and later), read into replication events.

Each log line is one JSON object: `{"t": {"$date": ...}, "s": "I", "c": "REPL", "id": 21358,
"ctx": ..., "msg": "Replica set state transition", "attr": {"newState": ..., "oldState": ...}}`.
A file is read line by line (a log of gigabytes costs what its replication events do), gzip,
bzip2 or xz compressed or not (rotated logs are). Lines that are not JSON objects (blank lines,
a 4.2 part of a log appended across an upgrade) are skipped; a file with no JSON line at all is
refused. A line a crash cut short is skipped, and a line glued after it is read.

Which member a line is about: its `host` field when the log was collected with one (log
shippers add it, so several members' logs can be merged into one file); otherwise the member
the log names itself ("Found self in config", id 21393, written at startup), in that file or in
another of its rotation (same directory, same name up to `.log`); otherwise `--member`.

What is read: mongod starting (id 4615611, with the time of the line before it), state
transitions (id 21358), other members' states as this member sees them
(id 21215 "Member is in new state", id 21216 "Member is now in state RS_DOWN"), elections
started and won, and stepdowns (see `mongodlog.py` for what they become).
"""

from __future__ import annotations

import bz2
import datetime as dt
import gzip
import json
import lzma
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Literal

from rsdrill.errors import RsdrillError
from rsdrill.redact import redact_uri

_STATE_TRANSITION = 21358
_MEMBER_NEW_STATE = 21215
_MEMBER_DOWN = 21216
_SELF_IN_CONFIG = 21393
_STARTING = 4615611
_ELECTION_WON = (21450, 21331)
_INVOLUNTARY_STEPDOWN = ("in response to heartbeat", "new term")
# A 4.2 (or older) line: `2024-05-14T10:14:02.118+0000 I  REPL     [replexec-0] ...`.
_PLAIN_TEXT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*\s+[FEWID]\d?\s+[A-Z_]+\s+\[")
_OPENERS = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}
THIS_MEMBER = "this member"

Kind = Literal["transition", "seen", "election", "elected", "stepdown", "restart"]


class MongodLogError(RsdrillError, ValueError):
    """A log that cannot be read or yields no fault: `str()` is `FILE:LINE: problem`."""


@dataclass(frozen=True)
class LogEvent:
    """One replication event read from the log: about `host`, by `observer`'s log and clock."""

    t: dt.datetime
    host: str
    kind: Kind
    line: int
    old: str | None = None
    new: str | None = None
    observer: str = ""
    source: str = ""
    last_alive: dt.datetime | None = None  # a restart's: the line before it


@dataclass
class _File:
    """One file's events, the member it is the log of ("" until known) and its line counts."""

    events: list[LogEvent]
    named: str | None = None
    json_lines: int = 0
    plain_text_line: int | None = None


def read_logs(paths: list[Path], member: str | None = None) -> list[LogEvent]:
    """The replication events of every file, each member's own events under its name."""
    files = {path: _read(path) for path in paths}
    names = _members(files, member)
    return [_named(e, names[path]) for path, f in files.items() for e in f.events]


def read_log(path: Path, member: str | None = None) -> list[LogEvent]:
    """The replication events in the log file at `path`, in time order."""
    return sorted(read_logs([path], member), key=lambda e: e.t)


def parse_log(
    lines: Iterable[str], member: str | None = None, source: str = "<log>"
) -> list[LogEvent]:
    """The replication events in `lines`, in time order (a stable sort: merged logs interleave)."""
    f = _parse(lines, source)
    name = f.named or member or THIS_MEMBER
    return sorted((_named(e, name) for e in f.events), key=lambda e: e.t)


def _named(event: LogEvent, name: str) -> LogEvent:
    if event.host and event.observer:
        return event
    return replace(event, host=event.host or name, observer=event.observer or name)


def _read(path: Path) -> _File:
    try:
        with _open(path) as stream:
            f = _parse(stream, str(path))
    except OSError as exc:  # gzip.BadGzipFile and lzma.LZMAError's kin included
        raise MongodLogError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (EOFError, lzma.LZMAError) as exc:
        raise MongodLogError(f"{path}: cannot read: compressed data cut short ({exc})") from None
    if f.json_lines == 0:
        if f.plain_text_line is not None:
            raise MongodLogError(
                f"{path}:{f.plain_text_line}: a plain-text log line (MongoDB 4.2 or older): "
                "from-mongod-log reads the JSON log of MongoDB 4.4 and later"
            )
        raise MongodLogError(f"{path}: no JSON log line in it: not a mongod log of 4.4 or later")
    return f


def _open(path: Path) -> IO[str]:
    with path.open("rb") as probe:
        head = probe.read(6)
    for magic, opener in _OPENERS.items():
        if head.startswith(magic):
            return opener(path, "rt", encoding="utf-8", errors="replace")  # type: ignore[operator]
    return path.open(encoding="utf-8", errors="replace")


def _parse(lines: Iterable[str], source: str) -> _File:
    f = _File([])
    before: tuple[Any, int] | None = None  # the line before, for a restart's last sign of life
    for number, raw in enumerate(lines, 1):
        for entry in _entries(raw.strip().strip("\x00"), number, source, f):
            f.json_lines += 1
            event = _event(entry, number, source)
            if isinstance(event, str):
                f.named = f.named or event
            elif event is not None:
                if event.kind == "restart" and before is not None:
                    event = replace(event, last_alive=_time(before[0], before[1], source))
                f.events.append(event)
            before = entry, number
    return f


def _entries(text: str, number: int, source: str, f: _File) -> Iterator[Any]:
    if not text.startswith("{"):
        if f.plain_text_line is None and _PLAIN_TEXT.match(text):
            f.plain_text_line = number
        return
    try:
        yield json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text) or exc.msg.startswith("Unterminated string"):
            return  # cut short: the last line a crash left half-written
        glued = text.find('{"t":', 1)
        if glued > 0:  # the restart's first line, after a half-written one
            yield from _entries(text[glued:], number, source, f)
            return
        raise MongodLogError(f"{source}:{number}: not a JSON log line: {exc.msg}") from None


def _event(entry: Any, line: int, source: str) -> LogEvent | str | None:
    """The event of one log line; its member's own name (str) for "Found self in config"."""
    if not isinstance(entry, dict):
        return None
    msg = str(entry.get("msg", ""))
    attr = entry.get("attr")
    if not isinstance(attr, dict):
        attr = {}
    log_id = entry.get("id")
    kind: Kind | None = None
    observer = _text(entry.get("host"))  # "" for the file's own member, named later
    host, old, new = observer, None, None
    if log_id == _SELF_IN_CONFIG or msg == "Found self in config":
        return _text(attr.get("hostAndPort")) or None
    if log_id == _STARTING or msg == "MongoDB starting":
        kind = "restart"
    elif log_id == _STATE_TRANSITION or msg == "Replica set state transition":
        kind, old, new = "transition", attr.get("oldState"), attr.get("newState")
    elif log_id == _MEMBER_NEW_STATE or msg == "Member is in new state":
        kind, new, host = "seen", attr.get("newState"), _text(attr.get("hostAndPort"))
    elif log_id == _MEMBER_DOWN or msg == "Member is now in state RS_DOWN":
        kind, new, host = "seen", "DOWN", _text(attr.get("hostAndPort"))
    elif msg.startswith("Starting an election"):
        kind = "election"
    elif log_id in _ELECTION_WON or msg.startswith(("Election succeeded", "Transition to primary")):
        kind = "elected"
    elif _is_stepdown(msg, attr):
        kind = "stepdown"
    if kind is None or (kind == "seen" and not host):
        return None
    return LogEvent(_time(entry, line, source), host, kind, line, old, new, observer, source)


def _text(value: Any) -> str:
    # Names from a log end up in the timeline's notes: never a password.
    return redact_uri(str(value)) if value else ""


def _is_stepdown(msg: str, attr: dict[str, Any]) -> bool:
    command = attr.get("command")
    if isinstance(command, dict) and "replSetStepDown" in command:
        return True
    if "replsetstepdown" in msg.lower():
        return True
    return msg.startswith("Stepping down from primary") and not any(
        words in msg for words in _INVOLUNTARY_STEPDOWN
    )


def _time(entry: dict[str, Any], line: int, source: str) -> dt.datetime:
    stamp = entry.get("t")
    value = stamp.get("$date") if isinstance(stamp, dict) else stamp
    if isinstance(value, dict):  # canonical extended JSON: {"$numberLong": "<ms>"}
        value = value.get("$numberLong")
    try:
        if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
            return dt.datetime.fromtimestamp(int(value) / 1000, dt.UTC)
        when = dt.datetime.fromisoformat(str(value))
    except (TypeError, ValueError, OverflowError, OSError):
        raise MongodLogError(f"{source}:{line}: no time ({{'t': {{'$date': ...}}}})") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _rotation(path: Path) -> tuple[Path, str]:
    """The files of one member's rotation share this: `mongod.log`, `mongod.log.1.gz` and
    `mongod.log.2024-05-14T00-00-00` are all (dir, `mongod.log`)."""
    name = path.name
    cut = name.find(".log")
    return path.parent, name[: cut + 4] if cut >= 0 else name


def _members(files: dict[Path, _File], member: str | None) -> dict[Path, str]:
    """Each file's own member: named in it or its rotation, else `member`; one unnamed
    member's log when nothing names it is `this member`, two are refused (one timeline)."""
    named = {_rotation(p): f.named for p, f in files.items() if f.named}
    names = {p: f.named or named.get(_rotation(p)) for p, f in files.items()}
    needing = [p for p, f in files.items() if not names[p] and any(
        not e.host or not e.observer for e in f.events)]  # fmt: skip
    rotations = list(dict.fromkeys(_rotation(p) for p in needing))
    if len(rotations) > 1:
        first, second = (next(p for p in needing if _rotation(p) == r) for r in rotations[:2])
        raise MongodLogError(
            f"{second}: which member's log is this? Neither it nor {first} names its member "
            '("Found self in config", written at startup, or a host field) and --member names '
            "one: derive from each member's log alone, or add a host field to each line"
        )
    if rotations and member is None and len(files) > len(needing):
        raise MongodLogError(
            f"{needing[0]}: which member's log is this? It does not name its member "
            '("Found self in config", written at startup, or a host field): say with --member'
        )
    return {p: names[p] or member or THIS_MEMBER for p in files}
