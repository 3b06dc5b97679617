"""One way to read a member's own state from its replSetGetStatus reply, or from its hello
where that says nothing (`rsdrill.states`), used by selection, the recovery probe, the guards
and the sandbox's status."""

from __future__ import annotations

from typing import Any

import pytest

from rsdrill.states import STANDALONE, hello_state, own_state


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ({"ok": 0, "code": 76, "codeName": "NoReplicationEnabled"}, STANDALONE),
        # A compatible server without the command: its hello decides (FerretDB claims a
        # replica set with --repl-set-name).
        ({"ok": 0, "code": 59, "codeName": "CommandNotFound"}, None),
        (
            {
                "ok": 1,
                "members": [
                    {"name": "a", "stateStr": "PRIMARY"},
                    {"name": "b", "stateStr": "RECOVERING", "self": True},
                ],
            },
            "RECOVERING",
        ),
        ({"ok": 1, "members": [{"name": "a", "stateStr": "PRIMARY"}]}, None),
        ({"ok": 0, "code": 94, "codeName": "NotYetInitialized"}, None),
        # Left out of a newer config (as mongod answers it then).
        ({"ok": 0, "code": 93, "codeName": "InvalidReplicaSetConfig"}, "REMOVED"),
    ],
)
def test_own_state_is_the_self_entry_or_standalone(status: dict[str, Any], state: str) -> None:
    assert own_state(status) == state


@pytest.mark.parametrize(
    ("hello", "state"),
    [
        ({"isWritablePrimary": True, "setName": "rs0", "hosts": ["a:1"]}, "PRIMARY"),
        ({"ismaster": True, "setName": "rs0"}, "PRIMARY"),  # isMaster's form
        ({"isWritablePrimary": False, "secondary": True, "setName": "rs0"}, "SECONDARY"),
        ({"isWritablePrimary": False, "arbiterOnly": True, "setName": "rs0"}, "ARBITER"),
        ({"isWritablePrimary": False, "setName": "rs0"}, "STARTUP"),  # e.g. RECOVERING
        ({"isWritablePrimary": True}, STANDALONE),
        ({"ismaster": True}, STANDALONE),
        # mongod --replSet before rs.initiate(): no set yet, and not a standalone.
        ({"isWritablePrimary": False, "isreplicaset": True}, "STARTUP"),
        ({"isWritablePrimary": False}, "STARTUP"),
    ],
)
def test_hello_state_is_the_role_hello_gives(hello: dict[str, Any], state: str) -> None:
    assert hello_state(hello) == state
