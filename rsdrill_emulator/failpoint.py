"""MongoDB's `failCommand` fail point: make chosen commands fail, hang or drop the connection;
`onPrimaryTransactionalWrite`, which disrupts retryable writes (commands with a
txnNumber): with `failBeforeCommitExceptionCode` it fails them before anything is written,
otherwise (`closeConnection`, the default) it drops the connection after the write is applied;
`failGetMoreAfterCursorCheckout`, which fails a getMore once its cursor is found (the
cursor dies with it), so the error is the cursor's own: a change stream's resumable one carries
ResumableChangeStreamError, where failCommand's, raised before the cursor is known, does not;
and `stopReplProducer`, which stops a secondary fetching the oplog while it is on.

Configured with `{configureFailPoint: "failCommand", mode: "alwaysOn" | "off" | {times: N} |
{skip: N} | {activationProbability: p}, data: {failCommands: [...], appName, errorCode,
errorLabels, closeConnection, blockConnection, blockTimeMS, writeConcernError}}` as on a real
mongod; any command can be made to fail, hello included (the SDAM spec tests need it). One
extension, `afterExecution: true`, applies errorCode/closeConnection/block after the command
ran, which is how a reply gets lost after a write was applied (what retryable writes exist for).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.notify import sleep_at_least

_MODES = (
    "mode must be 'alwaysOn', 'off', {times: N} with N > 0, {skip: N} with N >= 0 or "
    "{activationProbability: p} with 0 <= p <= 1"
)


class CloseConnection(Exception):
    """Drop the client's connection without answering."""


AFTER_CURSOR_CHECKOUT = "failGetMoreAfterCursorCheckout"
# A secondary's oplog fetcher stops (heartbeats go on): writes waiting for it time out.
STOP_REPLICATION = "stopReplProducer"
NAMES = ("failCommand", "onPrimaryTransactionalWrite", AFTER_CURSOR_CHECKOUT, STOP_REPLICATION)
_WRITES = frozenset({"insert", "update", "delete", "findandmodify"})


@dataclass
class FailPoint:
    commands: frozenset[str]
    times: int | None  # None: always on
    error_code: int | None = None
    # The labels to answer with; None: the ones the server would give the error itself.
    error_labels: tuple[str, ...] | None = None
    close_connection: bool = False
    block_ms: int = 0
    write_concern_error: dict[str, Any] | None = None
    after_execution: bool = False
    # Only commands that carry a txnNumber (onPrimaryTransactionalWrite).
    retryable_writes_only: bool = False
    # Only connections whose handshake named this application (failCommand's `appName`).
    app_name: str | None = None
    # Matching commands to let through before it fires (mode {skip: N}).
    skip: int = 0
    # The chance that it fires for a matching command (mode {activationProbability: p}).
    probability: float = 1.0
    # Consulted by getMore once the cursor is found, not before any command runs.
    at_cursor_checkout: bool = False

    @classmethod
    def from_command(cls, body: dict[str, Any]) -> FailPoint | None:
        """Parse configureFailPoint; None when the mode is "off"."""
        name = body.get("configureFailPoint")
        if name not in NAMES:
            raise CommandError(2, f"unknown fail point: {name!r}")
        mode = body.get("mode")
        if mode == "off":
            return None
        times, skip, probability = _mode(mode)
        data = body.get("data") or {}
        if name == "onPrimaryTransactionalWrite":
            code = data.get("failBeforeCommitExceptionCode")
            return cls(
                commands=_WRITES,
                times=times,
                error_code=int(code) if code is not None else None,
                # Whatever the code: nothing was written, and drivers retry it (the retryable
                # writes spec tests expect the retry), so the error carries the label.
                error_labels=("RetryableWriteError",),
                # As mongod: the connection is dropped unless the data says not to, with a code
                # too (the write then fails before it commits, so its retry runs it again).
                close_connection=bool(data.get("closeConnection", True)),
                after_execution=code is None,
                retryable_writes_only=True,
                skip=skip,
                probability=probability,
            )
        if name == STOP_REPLICATION:  # no command fails: the member stops fetching
            return cls(commands=frozenset(), times=times, skip=skip, probability=probability)
        if name == AFTER_CURSOR_CHECKOUT:
            return cls(
                commands=frozenset({"getmore"}),
                times=times,
                error_code=int(data.get("errorCode", 96)),  # mongod's default: OperationFailed
                close_connection=bool(data.get("closeConnection")),
                at_cursor_checkout=True,
                skip=skip,
                probability=probability,
            )
        names = data.get("failCommands")
        if not isinstance(names, list) or not names:
            raise CommandError(2, "data.failCommands must be a non-empty list of command names")
        return cls(
            commands=frozenset(str(n).lower() for n in names),
            times=times,
            error_code=data.get("errorCode"),
            error_labels=tuple(data["errorLabels"]) if "errorLabels" in data else None,
            close_connection=bool(data.get("closeConnection")),
            block_ms=int(data.get("blockTimeMS") or 0) if data.get("blockConnection") else 0,
            write_concern_error=data.get("writeConcernError"),
            after_execution=bool(data.get("afterExecution")),
            app_name=data.get("appName"),
            skip=skip,
            probability=probability,
        )

    def fires_for(
        self, command: str, body: dict[str, Any], app_name: str | None, statements: int = 1
    ) -> bool:
        """True (and one use spent) when this command, from a connection of `app_name`,
        should fail now. `statements`: the retryable writes it would apply (a retry of
        statements already applied applies none, so onPrimaryTransactionalWrite, which mongod
        checks as each is written, neither fires nor counts it)."""
        if command.lower() not in self.commands or self.times == 0:
            return False
        if self.retryable_writes_only and ("txnNumber" not in body or statements == 0):
            return False
        if self.app_name is not None and app_name != self.app_name:
            return False
        if self.skip:
            # onPrimaryTransactionalWrite's skip counts documents written, failCommand's commands.
            count = statements if self.retryable_writes_only else 1
            if self.skip >= count:
                self.skip -= count
                return False
            self.skip = 0
        if self.probability < 1.0 and random.random() >= self.probability:
            return False
        if self.times is not None:
            self.times -= 1
        return True

    async def disrupt(self, retryable_write: bool) -> dict[str, Any] | None:
        """Block, drop the connection, or return the error reply; None to carry on. Without
        `errorLabels` of its own, the error gets the labels the server would give it (a
        retryable write's retryable error: RetryableWriteError)."""
        if self.block_ms:
            await sleep_at_least(self.block_ms / 1000)
        if self.close_connection:
            raise CloseConnection
        if self.error_code is not None:
            error = CommandError(int(self.error_code), "Failing command via a fail point")
            if self.error_labels is not None:
                reply = error.document()
                reply.pop("errorLabels", None)
                return {**reply, **({"errorLabels": list(self.error_labels)}
                                    if self.error_labels else {})}  # fmt: skip
            return error.document(retryable_write=retryable_write)
        return None


def _mode(mode: Any) -> tuple[int | None, int, float]:
    """configureFailPoint's mode as (times, None: unlimited; matches to skip; probability)."""
    if mode == "alwaysOn":
        return None, 0, 1.0
    if isinstance(mode, dict) and len(mode) == 1:
        ((key, value),) = mode.items()
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if key == "times" and number and int(value) == value and value > 0:
            return int(value), 0, 1.0
        if key == "skip" and number and int(value) == value and value >= 0:
            return None, int(value), 1.0
        if key == "activationProbability" and number and 0 <= value <= 1:
            return None, 0, float(value)
    raise CommandError(2, _MODES)
