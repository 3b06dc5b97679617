"""MONGODB-AWS on the server side, as mongod does it: the member never sees a secret.

The conversation (the drivers' auth specification): the client's saslStart carries its 32-byte
nonce `r` and channel-binding flag `p`; the member answers with its nonce `s` (the client's
plus 32 random bytes) and the STS host `h` the client is to sign for. The client's saslContinue
carries the SigV4 `Authorization` header `a`, its `X-Amz-Date` `d` and, with temporary
credentials, the session token `t` of an STS GetCallerIdentity request that also signs the
member's nonce. The member sends that request to STS itself: a signature that STS accepts
proves the secret, and the ARN STS answers with is the user (on `$external`). An assumed
role's session name is replaced by `*`, as mongod does, so a role's user covers its sessions.

The sandbox's STS endpoint is its `aws_sts_url` (a moto server in the tests, as mongod's
`awsSTSUrl` test parameter points it elsewhere); the signed Host header stays `h`.
"""

from __future__ import annotations

import asyncio
import base64
import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import bson
from bson.binary import Binary

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.events import EventLog

MECHANISM = "MONGODB-AWS"
STS_HOST = "sts.amazonaws.com"
STS_BODY = b"Action=GetCallerIdentity&Version=2011-06-15"
CLIENT_NONCE_BYTES = 32
GS2_NO_CHANNEL_BINDING = ord("n")
# Headers the client's signature must cover: without the nonce a signed request could be replayed.
SIGNED_HEADERS = {"content-length", "content-type", "host", "x-amz-date",
                  "x-mongodb-gs2-cb-flag", "x-mongodb-server-nonce"}  # fmt: skip
STS_TIMEOUT_S = 10.0
_ASSUMED_ROLE = re.compile(r"^(arn:[^:]+:sts::\d+:assumed-role/[^/]+)/.+$")


class AwsLoginError(Exception):
    """The client's messages are malformed, or STS did not accept its signed request."""


def user_of(arn: str) -> str:
    """The `$external` user an STS caller ARN logs in as: an assumed role's session is `*`."""
    return _ASSUMED_ROLE.sub(r"\1/*", arn)


@dataclass
class AwsConversation:
    """One login in progress: `first(payload)` on saslStart, `await final(payload)` (the user
    ARN) on saslContinue."""

    sts_url: str
    sts_host: str = STS_HOST
    _nonce: bytes = b""

    def first(self, payload: bytes) -> bytes:
        doc = _decode(payload)
        client_nonce, flag = doc.get("r"), doc.get("p")
        if not isinstance(client_nonce, bytes) or len(client_nonce) != CLIENT_NONCE_BYTES:
            raise AwsLoginError("the client nonce must be 32 bytes")
        if flag != GS2_NO_CHANNEL_BINDING:
            raise AwsLoginError("channel binding is not supported")
        self._nonce = client_nonce + secrets.token_bytes(CLIENT_NONCE_BYTES)
        return bson.encode({"s": Binary(self._nonce), "h": self.sts_host})

    async def final(self, payload: bytes) -> str:
        if not self._nonce:
            raise AwsLoginError("saslContinue before saslStart")
        doc = _decode(payload)
        authorization, date, token = doc.get("a"), doc.get("d"), doc.get("t")
        if not isinstance(authorization, str) or not isinstance(date, str):
            raise AwsLoginError("the client's request carries no Authorization or X-Amz-Date")
        signed = set(_between(authorization, "SignedHeaders=", ",").split(";"))
        needed = SIGNED_HEADERS | ({"x-amz-security-token"} if token is not None else set())
        if not needed <= signed:
            raise AwsLoginError(f"the signature must cover {', '.join(sorted(needed - signed))}")
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Content-Length": str(len(STS_BODY)),
            "Host": self.sts_host,
            "X-Amz-Date": date,
            "X-MongoDB-Server-Nonce": base64.b64encode(self._nonce).decode(),
            "X-MongoDB-GS2-CB-Flag": "n",
            "Authorization": authorization,
        }
        if token is not None:
            headers["X-Amz-Security-Token"] = str(token)
        # A blocking HTTP call, off the member's event loop.
        return user_of(await asyncio.to_thread(_caller_arn, self.sts_url, headers))


def _caller_arn(sts_url: str, headers: dict[str, str]) -> str:
    """POST the signed GetCallerIdentity to STS; the caller's ARN, or why STS refused."""
    # Imported here: every member imports this module, few ever log in through AWS (urllib
    # and its email and http modules are a tenth of a member's start-up).
    import urllib.error
    import urllib.request

    request = urllib.request.Request(sts_url, data=STS_BODY, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=STS_TIMEOUT_S) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise AwsLoginError(f"STS refused the request: {_error_code(exc.read())}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise AwsLoginError(f"STS at {sts_url} did not answer: {exc}") from None
    arn = _xml_text(body, "Arn")
    if not arn:
        raise AwsLoginError("STS answered without an Arn")
    return arn


def _decode(payload: bytes) -> dict[str, Any]:
    try:
        return dict(bson.decode(payload))
    except (bson.errors.BSONError, ValueError, IndexError) as exc:
        raise AwsLoginError(f"malformed payload: {exc}") from None


def _between(text: str, start: str, end: str) -> str:
    return text.partition(start)[2].partition(end)[0]


def _xml_text(body: bytes, tag: str) -> str | None:
    """The text of the first element named `tag` (any namespace) in an STS XML answer."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    found = next((e for e in root.iter() if e.tag.rsplit("}", 1)[-1] == tag), None)
    return found.text if found is not None else None


def _error_code(body: bytes) -> str:
    return _xml_text(body, "Code") or "no error code"


def start(sts_url: str, db: str, payload: bytes) -> tuple[AwsConversation, dict[str, Any]]:
    """saslStart: the conversation to keep for the connection and the reply."""
    if db != "$external":
        raise CommandError(18, "MONGODB-AWS users are on the $external database")
    conversation = AwsConversation(sts_url)
    try:
        answer = conversation.first(payload)
    except AwsLoginError:
        raise CommandError(18, "Authentication failed.") from None
    return conversation, {"conversationId": 1, "done": False, "payload": Binary(answer)}


async def finish(
    conversation: AwsConversation, payload: bytes, users: Collection[str], events: EventLog
) -> tuple[str, dict[str, Any]]:
    """saslContinue: the user logged in and the reply. As mongod, the refusal says no more
    than "Authentication failed."; the cause (never a secret) goes to the member's events."""
    try:
        user = await conversation.final(payload)
    except AwsLoginError as exc:
        events.emit("login_refused", mechanism=MECHANISM, reason=str(exc))
        raise CommandError(18, "Authentication failed.") from None
    if user not in users:
        raise CommandError(11, f'Could not find user "{user}" for db "$external"')
    return user, {"conversationId": 1, "done": True, "payload": Binary(b"")}
