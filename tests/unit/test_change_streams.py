"""Change streams' pure parts: resume tokens (opaque, ordered by oplog position, checked) and
the update descriptions of `update` events."""

from __future__ import annotations

import pytest

from rsdrill.sandbox.emulator.changestream import position_of, resume_token, update_description
from rsdrill.sandbox.emulator.errors import CommandError
from rsdrill.sandbox.emulator.oplog import INITIATE_OPTIME, OpTime


def test_tokens_round_trip_and_sort_like_positions() -> None:
    positions = [INITIATE_OPTIME, OpTime(1, 5, 1), OpTime(1, 5, 2), OpTime(2, 6, 1)]
    tokens = [resume_token(p)["_data"] for p in positions]
    assert [position_of({"_data": t}) for t in tokens] == positions
    assert tokens == sorted(tokens)


@pytest.mark.parametrize("token", [None, {}, {"_data": "zz"}, {"_data": "G" * 32}, "x"])
def test_foreign_tokens_are_invalid_resume_tokens(token: object) -> None:
    with pytest.raises(CommandError) as info:
        position_of(token)
    assert info.value.code == 260


def test_update_descriptions_name_what_changed() -> None:
    old = {"_id": 1, "a": {"b": 1, "c": 2}, "arr": ["x", {"y": 1}, 3, 4], "gone": True, "n": 1}
    new = {"_id": 1, "a": {"b": 5, "c": 2}, "arr": ["x", {"y": 2}], "n": 1.0, "new": [1]}
    assert update_description(old, new) == {
        "updatedFields": {"a.b": 5, "arr.1": {"y": 2}, "n": 1.0, "new": [1]},
        "removedFields": ["gone"],
        "truncatedArrays": [{"field": "arr", "newSize": 2}],
    }
    assert update_description(old, old) == {
        "updatedFields": {},
        "removedFields": [],
        "truncatedArrays": [],
    }
