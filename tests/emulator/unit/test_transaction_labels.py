"""The error labels a transaction's commands carry, as mongod gives them (drivers decide on the
labels, not the codes)."""

from __future__ import annotations

from typing import Any

import pytest
from bson.int64 import Int64

from rsdrill_emulator.commands import Request
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.transactions import label_error, retryable_write

SESSION = {"lsid": {"id": b"x"}, "txnNumber": Int64(3)}


def _request(name: str, **body: Any) -> Request:
    return Request("db", name, {name: 1, **body}, False, 1)


def _labels(req: Request, code: int, **extra: Any) -> list[str]:
    reply = {**CommandError(code, "x").document(retryable_write=retryable_write(req)), **extra}
    label_error(req, reply)
    return reply.get("errorLabels", [])


@pytest.mark.parametrize(
    ("code", "labels"),
    [
        (112, ["TransientTransactionError"]),  # WriteConflict
        (251, ["TransientTransactionError"]),  # NoSuchTransaction
        (10107, ["TransientTransactionError"]),  # NotWritablePrimary: never RetryableWriteError
        (11000, []),  # DuplicateKey: the transaction would fail again
        (263, []),  # OperationNotSupportedInTransaction
    ],
)
def test_a_statement_in_a_transaction(code: int, labels: list[str]) -> None:
    req = _request("insert", autocommit=False, **SESSION)
    assert _labels(req, code) == labels


@pytest.mark.parametrize(
    ("code", "extra", "labels"),
    [
        (10107, {}, ["RetryableWriteError"]),  # the driver retries the commit itself
        (91, {}, ["RetryableWriteError"]),
        (251, {}, ["TransientTransactionError"]),
        # It may have committed on a member that then rolled back: not safe to run again.
        (251, {"writeConcernError": {"code": 64}}, []),
        (112, {}, ["TransientTransactionError"]),
        (11601, {}, []),  # Interrupted
    ],
)
def test_a_commit(code: int, extra: dict[str, Any], labels: list[str]) -> None:
    req = _request("commitTransaction", autocommit=False, **SESSION)
    assert _labels(req, code, **extra) == labels


def test_outside_transactions_only_retryable_writes_are_labelled() -> None:
    assert _labels(_request("insert", **SESSION), 10107) == ["RetryableWriteError"]
    assert _labels(_request("insert"), 10107) == []
    assert _labels(_request("insert"), 112) == []
