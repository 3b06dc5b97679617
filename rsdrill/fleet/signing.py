"""The fleet key and the records it signs.

A lever event or a lease is an HMAC-SHA256 over its canonical JSON (sorted keys, no spaces,
the signature left out), keyed by the fleet key: `RSDRILL_FLEET_KEY`, or the first line of
the file `RSDRILL_FLEET_KEY_FILE` names (a Kubernetes Secret mounted as a file). Whoever runs
experiments holds it; whoever can only write to the shared store does not, so a record they
wrote is found unsigned and ignored (and reported)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

from rsdrill.errors import RsdrillError

KEY_ENV = "RSDRILL_FLEET_KEY"
KEY_FILE_ENV = "RSDRILL_FLEET_KEY_FILE"
SIGNATURE = "signature"
MIN_KEY_BYTES = 16


class FleetKeyError(RsdrillError):
    """The fleet key is missing where it is required, unreadable or too short."""


def fleet_key() -> bytes | None:
    """The fleet key from the environment, None when none is set."""
    raw = os.environ.get(KEY_ENV)
    source = KEY_ENV
    if raw is None and os.environ.get(KEY_FILE_ENV):
        path = Path(os.environ[KEY_FILE_ENV])
        source = f"{KEY_FILE_ENV} ({path})"
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise FleetKeyError(f"{source}: {exc.strerror or exc}") from None
        raw = lines[0].strip() if lines else ""
    if raw is None:
        return None
    key = raw.encode()
    if len(key) < MIN_KEY_BYTES:
        raise FleetKeyError(f"{source}: the fleet key must be at least {MIN_KEY_BYTES} bytes")
    return key


def _canonical(record: dict[str, Any]) -> bytes:
    body = {k: v for k, v in record.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()


def signed(record: dict[str, Any], key: bytes | None) -> dict[str, Any]:
    """`record` with its signature (unchanged without a key)."""
    if key is None:
        return dict(record)
    return {**record, SIGNATURE: hmac.new(key, _canonical(record), hashlib.sha256).hexdigest()}


def genuine(record: dict[str, Any], key: bytes | None) -> bool:
    """Whether `record` was signed with `key`; without a key every record counts."""
    if key is None:
        return True
    given = record.get(SIGNATURE)
    if not isinstance(given, str):
        return False
    expected = hmac.new(key, _canonical(record), hashlib.sha256).hexdigest()
    return hmac.compare_digest(given, expected)
