"""Command errors with MongoDB's codes, names and error labels."""

from __future__ import annotations

from typing import Any

CODE_NAMES = {
    2: "BadValue",
    6: "HostUnreachable",
    7: "HostNotFound",
    9: "FailedToParse",
    11: "UserNotFound",
    14: "TypeMismatch",
    18: "AuthenticationFailed",
    20: "IllegalOperation",
    24: "LockTimeout",
    26: "NamespaceNotFound",
    27: "IndexNotFound",
    28: "PathNotViable",
    40: "ConflictingUpdateOperators",
    43: "CursorNotFound",
    48: "NamespaceExists",
    50: "MaxTimeMSExpired",
    54: "NotSingleValueField",
    56: "EmptyFieldName",
    59: "CommandNotFound",
    63: "StaleShardVersion",
    64: "WriteConcernFailed",
    66: "ImmutableField",
    67: "CannotCreateIndex",
    72: "InvalidOptions",
    73: "InvalidNamespace",
    74: "NodeNotFound",
    76: "NoReplicationEnabled",
    85: "IndexOptionsConflict",
    86: "IndexKeySpecsConflict",
    89: "NetworkTimeout",
    91: "ShutdownInProgress",
    93: "InvalidReplicaSetConfig",
    94: "NotYetInitialized",
    95: "NotSecondary",
    100: "UnsatisfiableWriteConcern",
    103: "NewReplicaSetConfigurationIncompatible",
    109: "ConfigurationInProgress",
    115: "CommandNotSupported",
    112: "WriteConflict",
    133: "FailedToSatisfyReadPreference",
    150: "StaleEpoch",
    166: "CommandNotSupportedOnView",
    168: "InvalidPipelineOperator",
    189: "PrimarySteppedDown",
    197: "InvalidIndexSpecificationOption",
    202: "NetworkInterfaceExceededTimeLimit",
    211: "KeyNotFound",
    217: "ConflictingOperationInProgress",
    225: "TransactionTooOld",
    234: "RetryChangeStream",
    239: "SnapshotTooOld",
    251: "NoSuchTransaction",
    256: "TransactionCommitted",
    260: "InvalidResumeToken",
    262: "ExceededTimeLimit",
    263: "OperationNotSupportedInTransaction",
    267: "PreparedTransactionInProgress",
    280: "ChangeStreamFatalError",
    286: "ChangeStreamHistoryLost",
    308: "CurrentConfigNotCommittedYet",
    9001: "SocketException",
    10058: "LegacyNotPrimary",
    10107: "NotWritablePrimary",
    11000: "DuplicateKey",
    11600: "InterruptedAtShutdown",
    11601: "Interrupted",
    11602: "InterruptedDueToReplStateChange",
    13388: "StaleConfig",
    13435: "NotPrimaryNoSecondaryOk",
    13436: "NotPrimaryOrSecondary",
    40324: "UnrecognizedPipelineStage",
    40571: "Location40571",
}

# Codes on which MongoDB labels a retryable write's failure RetryableWriteError.
RETRYABLE_WRITE_CODES = frozenset(
    {6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 63, 150, 134}
)

# mongod's NotPrimaryError category: errors that mean "this member's role changed". Since 4.4
# they carry the member's topologyVersion, so a client can tell news (a newer version than the
# one it knows: mark the server Unknown, check it at once) from a stale error (ignore it). The
# ShutdownError codes (91, 11600) carry it only during a real shutdown's quiesce period, which
# the emulator has not: it exits at once.
NOT_PRIMARY_CODES = frozenset({189, 10058, 10107, 11602, 13435, 13436})


class CommandError(Exception):
    """A command failed; rendered as `{ok: 0, errmsg, code, codeName, errorLabels}`."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        labels: tuple[str, ...] = (),
        info: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.labels = labels
        self.info = info or {}

    @property
    def code_name(self) -> str:
        return CODE_NAMES.get(self.code, f"Location{self.code}")

    def document(self, *, retryable_write: bool = False) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "ok": 0.0,
            "errmsg": self.message,
            "code": self.code,
            "codeName": self.code_name,
            **self.info,
        }
        labels = list(self.labels)
        if retryable_write and self.code in RETRYABLE_WRITE_CODES:
            labels.append("RetryableWriteError")
        if labels:
            doc["errorLabels"] = labels
        return doc


def attach_topology_version(reply: dict[str, Any], topology_version: dict[str, Any]) -> None:
    """Give a reply whose error, or writeConcernError, is a NotPrimary one the member's
    topologyVersion (at the top level, as mongod puts it for both)."""
    codes = {reply.get("code") if not reply.get("ok") else None,
             (reply.get("writeConcernError") or {}).get("code")}  # fmt: skip
    if codes & NOT_PRIMARY_CODES:
        reply.setdefault("topologyVersion", topology_version)


def write_concern_error(code: int, message: str, **info: Any) -> dict[str, Any]:
    """The `writeConcernError` sub-document of a write reply."""
    doc: dict[str, Any] = {"code": code, "codeName": CODE_NAMES.get(code, ""), "errmsg": message}
    if info:
        doc["errInfo"] = info
    return doc
