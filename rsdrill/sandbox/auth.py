"""A sandbox that requires a login, as production sets do: the admin user `rsdrill` (role root)
and any other users asked for, each with built-in roles and a random password kept in the
sandbox directory (readable by its owner only) and never printed. Members log in to each other
as the admin user, as a keyfile lets real members do."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rsdrill.scram import MECHANISMS, Credentials, Keys, derive_keys

AUTH_FILE = "auth.json"
USER = "rsdrill"
ITERATIONS = 15000  # MongoDB's default for SCRAM-SHA-256
ROOT = ("root", "admin")


def parse_role(text: str) -> tuple[str, str]:
    """`readWrite@app` → ("readWrite", "app"); a bare role is held on `admin`."""
    role, _, db = text.strip().partition("@")
    return role, db or "admin"


def create_auth(
    directory: Path,
    users: Mapping[str, Sequence[str]] | None = None,
    aws_users: Mapping[str, Sequence[str]] | None = None,
) -> Credentials:
    """Write the admin user and `users` (name → roles, e.g. ["clusterMonitor",
    "readWrite@app"]) with random passwords into the sandbox directory (mode 0600); returns the
    admin's credentials. `aws_users` (IAM ARN → roles) log in with MONGODB-AWS on `$external`:
    no password here, STS vouches for them."""
    directory.mkdir(parents=True, exist_ok=True)
    others = [{"user": name, "password": secrets.token_urlsafe(24), "roles": list(roles)}
              for name, roles in (users or {}).items()]  # fmt: skip
    iam = [{"user": arn, "roles": list(roles)} for arn, roles in (aws_users or {}).items()]
    record: dict[str, Any] = {"user": USER, "password": secrets.token_urlsafe(24),
              "salt": secrets.token_hex(16), "users": others, "aws_users": iam}  # fmt: skip
    path = directory / AUTH_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    return Credentials(record["user"], record["password"])


def _record(directory: Path) -> dict[str, Any] | None:
    path = directory / AUTH_FILE
    return dict(json.loads(path.read_text())) if path.exists() else None


def _users(record: dict[str, Any]) -> list[dict[str, Any]]:
    admin = {"user": record["user"], "password": record["password"], "roles": ["root@admin"]}
    return [admin, *record.get("users", [])]


def read_auth(directory: Path, user: str | None = None) -> Credentials | None:
    """A user's credentials (the admin's by default), or None when the sandbox requires no
    login; KeyError for a user it does not have."""
    record = _record(directory)
    if record is None:
        return None
    wanted = user or record["user"]
    for entry in _users(record):
        if entry["user"] == wanted:
            return Credentials(entry["user"], entry["password"])
    raise KeyError(f"the sandbox has no user {wanted!r}")


def user_roles(directory: Path) -> dict[str, list[tuple[str, str]]]:
    """Every user's roles as (role, database)."""
    record = _record(directory)
    if record is None:
        return {}
    everyone = [*_users(record), *record.get("aws_users", [])]
    return {u["user"]: [parse_role(r) for r in u["roles"]] for u in everyone}


def aws_users(directory: Path) -> frozenset[str]:
    """The IAM ARNs that may log in with MONGODB-AWS."""
    record = _record(directory)
    return frozenset(u["user"] for u in (record or {}).get("aws_users", []))


def server_keys(directory: Path) -> dict[str, dict[str, Keys]] | None:
    """What a member checks logins against: per mechanism, per user (None: no login needed)."""
    record = _record(directory)
    if record is None:
        return None
    salt = bytes.fromhex(record["salt"])
    return {m: {u["user"]: derive_keys(m, u["user"], u["password"], salt, ITERATIONS)
                for u in _users(record)}
            for m in MECHANISMS}  # fmt: skip
