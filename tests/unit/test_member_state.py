"""One way to read a member's own state from its replSetGetStatus reply (`rsdrill.states`),
used by selection, the recovery probe and the sandbox's status."""

from __future__ import annotations

from typing import Any

import pytest

from rsdrill.states import STANDALONE, own_state


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ({"ok": 0, "code": 76, "codeName": "NoReplicationEnabled"}, STANDALONE),
        ({"ok": 0, "code": 59, "codeName": "CommandNotFound"}, STANDALONE),
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
    ],
)
def test_own_state_is_the_self_entry_or_standalone(status: dict[str, Any], state: str) -> None:
    assert own_state(status) == state
