"""Change streams' pure parts: resume tokens (opaque, ordered by oplog position, checked)."""

from __future__ import annotations

import pytest

from rsdrill_emulator.changestream import ResumePoint, position_of, resume_token
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.oplog import INITIATE_OPTIME, OpTime


def test_tokens_round_trip_and_sort_like_positions() -> None:
    positions = [INITIATE_OPTIME, OpTime(1, 5, 1), OpTime(1, 5, 2), OpTime(2, 6, 1)]
    tokens = [resume_token(p)["_data"] for p in positions]
    assert [position_of({"_data": t}) for t in tokens] == [ResumePoint(p) for p in positions]
    assert tokens == sorted(tokens)


def test_an_invalidate_token_names_its_drop_and_sorts_after_it() -> None:
    drop = resume_token(OpTime(1, 5, 2))
    invalidate = resume_token(OpTime(1, 5, 2), invalidate=True)
    assert position_of(invalidate) == ResumePoint(OpTime(1, 5, 2), from_invalidate=True)
    assert drop["_data"] < invalidate["_data"] < resume_token(OpTime(1, 5, 3))["_data"]


def test_a_transactions_events_name_their_operation_in_order() -> None:
    entry = OpTime(1, 5, 2)
    ops = [resume_token(entry, op_index=i) for i in (0, 1, 255)]
    assert [position_of(token) for token in ops] == [
        ResumePoint(entry, op_index=i) for i in (0, 1, 255)
    ]
    datas = [token["_data"] for token in ops]
    assert resume_token(entry)["_data"] < datas[0] < datas[1] < datas[2]
    assert datas[2] < resume_token(OpTime(1, 5, 3))["_data"]


@pytest.mark.parametrize(
    "token",
    [
        None,
        {},
        {"_data": "zz"},
        {"_data": "G" * 32},
        "x",
        {"_data": "0" * 32 + "02"},
        {"_data": "0" * 32 + "03" + "0" * 8},
        {"_data": "0" * 32 + "02" + "G" * 8},
    ],
)
def test_foreign_tokens_are_invalid_resume_tokens(token: object) -> None:
    with pytest.raises(CommandError) as info:
        position_of(token)
    assert info.value.code == 260
