"""A set started outside rsdrill (the `existing_set` fixture) as a `platform: local` target."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rsdrill.sandbox.config import ReplSetSpec, member_dir


def set_uri(directory: Path, credentials: str = "") -> str:
    """The set's URI; `credentials` ("user:password@") and options as given."""
    spec = ReplSetSpec.read(directory)
    hosts = ",".join(m.host for m in spec.members)
    return f"mongodb://{credentials}{hosts}/?replicaSet={spec.set_name}"


def local_target(directory: Path, uri: str | None = None) -> dict[str, Any]:
    """`target:` naming each member's own start command and dbpath, as a user would."""
    members = [
        {
            "host": m.host,
            "start": f"{sys.executable} -m rsdrill_emulator --dir {directory} --host {m.host}",
            "dbpath": str(member_dir(directory, m) / "data"),
        }
        for m in ReplSetSpec.read(directory).members
    ]
    return {
        "platform": "local",
        "topology": "rs3",
        "uri": uri or set_uri(directory),
        "members": members,
    }
