"""A sandbox that requires a login, as production sets do: one user, whose random password is
kept in the sandbox directory (readable by its owner only) and never printed. Members log in to
each other with it too, as a keyfile lets real members do."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from rsdrill.scram import MECHANISMS, Credentials, Keys, derive_keys

AUTH_FILE = "auth.json"
USER = "rsdrill"
ITERATIONS = 15000  # MongoDB's default for SCRAM-SHA-256


def create_auth(directory: Path) -> Credentials:
    """Write a new user and random password into the sandbox directory (mode 0600)."""
    directory.mkdir(parents=True, exist_ok=True)
    record = {"user": USER, "password": secrets.token_urlsafe(24),
              "salt": secrets.token_hex(16)}  # fmt: skip
    path = directory / AUTH_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    return Credentials(record["user"], record["password"])


def read_auth(directory: Path) -> Credentials | None:
    """The sandbox's user, or None when it does not require a login."""
    path = directory / AUTH_FILE
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    return Credentials(record["user"], record["password"])


def server_keys(directory: Path) -> dict[str, dict[str, Keys]] | None:
    """What a member checks logins against: per mechanism, per user (None: no login needed)."""
    path = directory / AUTH_FILE
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    salt = bytes.fromhex(record["salt"])
    return {m: {record["user"]: derive_keys(m, record["user"], record["password"], salt,
                                            ITERATIONS)}
            for m in MECHANISMS}  # fmt: skip
