"""Pre- and post-images kept by a member as it applies the oplog, for a collection with
changeStreamPreAndPostImages enabled: what change streams read `fullDocumentBeforeChange` and
`fullDocument: whenAvailable` from, expired with the oplog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bson.timestamp import Timestamp

from rsdrill_emulator.datastore import DataStore
from rsdrill_emulator.oplog import make_entry
from rsdrill_emulator.storage import Database

NS = "app.kept"


def store(tmp_path: Path) -> DataStore:
    database = Database(tmp_path / "data")
    database.open()
    return DataStore(database)


def entry(op: str, o: dict[str, Any], secs: int, o2: dict[str, Any] | None = None) -> Any:
    return make_entry(op, NS if op != "c" else "app.$cmd", o, ts=Timestamp(secs, 1), term=1, o2=o2)


def test_images_are_kept_only_while_the_option_is_on_and_expire_with_the_oplog(
    tmp_path: Path,
) -> None:
    s = store(tmp_path)
    s.apply(entry("c", {"create": "kept"}, 1))
    s.apply(entry("i", {"_id": 1, "x": 0}, 2))
    s.apply(entry("u", {"$v": 2, "diff": {"u": {"x": 1}}}, 3, o2={"_id": 1}))
    assert s.images(1, 3, 1) is None  # not enabled yet
    s.apply(entry("c", {"collMod": "kept", "changeStreamPreAndPostImages": {"enabled": True}}, 4))
    assert s.options(NS) == {"changeStreamPreAndPostImages": {"enabled": True}}
    s.apply(entry("u", {"$v": 2, "diff": {"u": {"x": 2}}}, 5, o2={"_id": 1}))
    s.apply(entry("u", {"_id": 1, "y": 1}, 6, o2={"_id": 1}))  # a replacement
    s.apply(entry("d", {"_id": 1}, 7))
    assert s.images(1, 5, 1) == ({"_id": 1, "x": 1}, {"_id": 1, "x": 2})
    assert s.images(1, 6, 1) == ({"_id": 1, "x": 2}, {"_id": 1, "y": 1})
    assert s.images(1, 7, 1) == ({"_id": 1, "y": 1}, None)
    s.expire_images(1, 6, 1)
    assert s.images(1, 5, 1) is None and s.images(1, 6, 1) is not None
    s.apply(entry("c", {"drop": "kept"}, 8))
    assert s.options(NS) == {}
