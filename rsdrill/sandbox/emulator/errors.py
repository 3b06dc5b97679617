"""Command errors with MongoDB's codes, names and error labels."""

from __future__ import annotations

from typing import Any

CODE_NAMES = {
    2: "BadValue",
    20: "IllegalOperation",
    9: "FailedToParse",
    11: "UserNotFound",
    14: "TypeMismatch",
    26: "NamespaceNotFound",
    27: "IndexNotFound",
    40: "ConflictingUpdateOperators",
    43: "CursorNotFound",
    48: "NamespaceExists",
    50: "MaxTimeMSExpired",
    59: "CommandNotFound",
    64: "WriteConcernFailed",
    66: "ImmutableField",
    67: "CannotCreateIndex",
    72: "InvalidOptions",
    73: "InvalidNamespace",
    76: "NoReplicationEnabled",
    85: "IndexOptionsConflict",
    86: "IndexKeySpecsConflict",
    89: "NetworkTimeout",
    91: "ShutdownInProgress",
    93: "InvalidReplicaSetConfig",
    94: "NotYetInitialized",
    95: "NotSecondary",
    100: "UnsatisfiableWriteConcern",
    103: "CommandNotSupported",
    133: "FailedToSatisfyReadPreference",
    166: "CommandNotSupportedOnView",
    189: "PrimarySteppedDown",
    202: "NetworkInterfaceExceededTimeLimit",
    211: "KeyNotFound",
    197: "InvalidIndexSpecificationOption",
    225: "TransactionTooOld",
    260: "InvalidResumeToken",
    262: "ExceededTimeLimit",
    280: "ChangeStreamFatalError",
    286: "ChangeStreamHistoryLost",
    11000: "DuplicateKey",
    11600: "InterruptedAtShutdown",
    11602: "InterruptedDueToReplStateChange",
    10107: "NotWritablePrimary",
    13435: "NotPrimaryNoSecondaryOk",
    13436: "NotPrimaryOrSecondary",
    40324: "UnrecognizedPipelineStage",
    40571: "Location40571",
}

# Codes on which MongoDB labels a retryable write's failure RetryableWriteError.
RETRYABLE_WRITE_CODES = frozenset(
    {6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 63, 150, 134}
)


class CommandError(Exception):
    """A command failed; rendered as `{ok: 0, errmsg, code, codeName, errorLabels}`."""

    def __init__(self, code: int, message: str, *, labels: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.labels = labels

    @property
    def code_name(self) -> str:
        return CODE_NAMES.get(self.code, f"Location{self.code}")

    def document(self, *, retryable_write: bool = False) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "ok": 0.0,
            "errmsg": self.message,
            "code": self.code,
            "codeName": self.code_name,
        }
        labels = list(self.labels)
        if retryable_write and self.code in RETRYABLE_WRITE_CODES:
            labels.append("RetryableWriteError")
        if labels:
            doc["errorLabels"] = labels
        return doc


def write_concern_error(code: int, message: str, **info: Any) -> dict[str, Any]:
    """The `writeConcernError` sub-document of a write reply."""
    doc: dict[str, Any] = {"code": code, "codeName": CODE_NAMES.get(code, ""), "errmsg": message}
    if info:
        doc["errInfo"] = info
    return doc
