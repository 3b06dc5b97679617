"""Change streams' pure parts: resume tokens (opaque, ordered by oplog position, checked)."""

from __future__ import annotations

import pytest

from rsdrill.sandbox.emulator.changestream import position_of, resume_token
from rsdrill.sandbox.emulator.errors import CommandError
from rsdrill.sandbox.emulator.oplog import INITIATE_OPTIME, OpTime


def test_tokens_round_trip_and_sort_like_positions() -> None:
    positions = [INITIATE_OPTIME, OpTime(1, 5, 1), OpTime(1, 5, 2), OpTime(2, 6, 1)]
    tokens = [resume_token(p)["_data"] for p in positions]
    assert [position_of({"_data": t}) for t in tokens] == [(p, False) for p in positions]
    assert tokens == sorted(tokens)


def test_an_invalidate_token_names_its_drop_and_sorts_after_it() -> None:
    drop = resume_token(OpTime(1, 5, 2))
    invalidate = resume_token(OpTime(1, 5, 2), invalidate=True)
    assert position_of(invalidate) == (OpTime(1, 5, 2), True)
    assert drop["_data"] < invalidate["_data"] < resume_token(OpTime(1, 5, 3))["_data"]


@pytest.mark.parametrize(
    "token", [None, {}, {"_data": "zz"}, {"_data": "G" * 32}, "x", {"_data": "0" * 32 + "02"}]
)
def test_foreign_tokens_are_invalid_resume_tokens(token: object) -> None:
    with pytest.raises(CommandError) as info:
        position_of(token)
    assert info.value.code == 260
