"""SCRAM (RFC 5802; SHA-256 per RFC 7677, SHA-1 as MongoDB uses it): the two halves of the
conversation MongoDB's `saslStart`/`saslContinue` carry.

The client half lets rsdrill's own wire-level probes log in to a set that requires it; the server
half lets the sandbox require it, so that path is tested against a real client (pymongo) too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from bson import Binary

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-1")
_DIGEST = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-1": "sha1"}
MIN_ITERATIONS = 4096


@dataclass(frozen=True)
class Credentials:
    """A user to log in as; the password never appears in its repr. `mechanism` None: the
    strongest SCRAM the server offers for the user (`rsdrill.connection` also speaks
    MONGODB-X509, whose user may be empty: the certificate names it, PLAIN, and MONGODB-AWS:
    the access key id, its secret, the session `token` of temporary credentials; no user:
    the AWS SDK's credential chain)."""

    user: str
    password: str = field(repr=False)
    source: str = "admin"
    mechanism: str | None = None
    token: str | None = field(default=None, repr=False)


class ScramError(Exception):
    """The other side's message is malformed, or its proof or signature is wrong."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _fields(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed SCRAM message part {part[:20]!r}")
        out[key] = value
    return out


def _escape(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def mongo_password(mechanism: str, user: str, password: str) -> str:
    """The password as MongoDB feeds it to SCRAM: SHA-1 hashes `user:mongo:password` with MD5
    first; SHA-256 takes the password through SASLprep (RFC 4013), as drivers and servers do
    (pymongo's own implementation, so both sides agree on every code point)."""
    if mechanism == "SCRAM-SHA-1":
        return hashlib.md5(f"{user}:mongo:{password}".encode()).hexdigest()
    from pymongo.saslprep import saslprep

    try:
        return saslprep(password)
    except ValueError as exc:  # a prohibited code point: no server would accept it either
        raise ScramError(f"the password is not valid for SCRAM-SHA-256: {exc}") from None


@dataclass(frozen=True)
class Keys:
    """A user's SCRAM keys: what a server stores (salt, iterations, stored and server keys)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes
    # Only the client has it (a server stores the rest).
    salted_password: bytes = b""


def _client_key(mechanism: str, salted: bytes) -> bytes:
    return hmac.digest(salted, b"Client Key", _DIGEST[mechanism])


def derive_keys(mechanism: str, user: str, password: str, salt: bytes, iterations: int) -> Keys:
    """The salted password's keys (PBKDF2: as slow as `iterations` makes it)."""
    digest = _DIGEST[mechanism]
    salted = hashlib.pbkdf2_hmac(
        digest, mongo_password(mechanism, user, password).encode(), salt, iterations
    )
    return Keys(
        salt,
        iterations,
        hashlib.new(digest, _client_key(mechanism, salted)).digest(),
        hmac.digest(salted, b"Server Key", digest),
        salted,
    )


@dataclass
class ScramClient:
    """One client-side conversation: `first()`, then `final(server_first)`, then
    `verify(server_final)` (raises if the server does not know the password)."""

    mechanism: str
    user: str
    password: str
    nonce: str = field(default_factory=lambda: _b64(secrets.token_bytes(24)))
    _bare: str = ""
    _signature: bytes = b""

    def first(self) -> bytes:
        self._bare = f"n={_escape(self.user)},r={self.nonce}"
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        got = _fields(text)
        try:
            nonce, salt, iterations = got["r"], base64.b64decode(got["s"]), int(got["i"])
        except (KeyError, ValueError) as exc:
            raise ScramError(f"malformed server-first message: {exc}") from None
        if not nonce.startswith(self.nonce) or iterations < MIN_ITERATIONS:
            raise ScramError("server-first message: bad nonce or too few iterations")
        digest = _DIGEST[self.mechanism]
        keys = derive_keys(self.mechanism, self.user, self.password, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self._bare},{text},{without_proof}".encode()
        client_signature = hmac.digest(keys.stored_key, auth, digest)
        client_key = _client_key(self.mechanism, keys.salted_password)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._signature = hmac.digest(keys.server_key, auth, digest)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        got = _fields(server_final.decode())
        if "e" in got:
            raise ScramError(f"server refused: {got['e']}")
        if not hmac.compare_digest(got.get("v", ""), _b64(self._signature)):
            raise ScramError("the server's signature is wrong: it does not know the password")


@dataclass
class ScramServer:
    """One server-side conversation for a user whose `Keys` the server holds."""

    mechanism: str
    keys: dict[str, Keys]
    user: str = ""
    _auth_prefix: str = ""
    _nonce: str = ""

    def first(self, client_first: bytes) -> bytes:
        text = client_first.decode()
        if not text.startswith("n,,"):
            raise ScramError("channel binding is not supported")
        bare = text[3:]
        got = _fields(bare)
        self.user = got.get("n", "").replace("=2C", ",").replace("=3D", "=")
        if self.user not in self.keys:
            raise ScramError("authentication failed")
        keys = self.keys[self.user]
        self._nonce = got.get("r", "") + _b64(secrets.token_bytes(18))
        server_first = f"r={self._nonce},s={_b64(keys.salt)},i={keys.iterations}"
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        text = client_final.decode()
        without_proof, _, proof_part = text.rpartition(",p=")
        if _fields(without_proof).get("r") != self._nonce:
            raise ScramError("authentication failed")
        keys = self.keys[self.user]
        digest = _DIGEST[self.mechanism]
        auth = f"{self._auth_prefix},{without_proof}".encode()
        signature = hmac.digest(keys.stored_key, auth, digest)
        try:
            proof = base64.b64decode(proof_part)
        except ValueError:
            raise ScramError("authentication failed") from None
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        if not hmac.compare_digest(hashlib.new(digest, client_key).digest(), keys.stored_key):
            raise ScramError("authentication failed")
        return f"v={_b64(hmac.digest(keys.server_key, auth, digest))}".encode()


def sasl_conversation(
    client: ScramClient,
) -> Generator[dict[str, Any], dict[str, Any], None]:
    """The saslStart/saslContinue commands of one login, as a generator: send each command it
    yields (to the user's database) and `send()` back the reply; it returns once logged in,
    and raises ScramError when the server refuses (no password in the message)."""
    reply = yield {
        "saslStart": 1,
        "mechanism": client.mechanism,
        "payload": Binary(client.first()),
        "autoAuthorize": 1,
        "options": {"skipEmptyExchange": True},
    }
    _check(reply)
    conversation = reply.get("conversationId")
    reply = yield {
        "saslContinue": 1,
        "conversationId": conversation,
        "payload": Binary(client.final(bytes(reply["payload"]))),
    }
    _check(reply)
    client.verify(bytes(reply["payload"]))
    while not reply.get("done"):
        reply = yield {"saslContinue": 1, "conversationId": conversation, "payload": Binary(b"")}
        _check(reply)


def _check(reply: dict[str, Any]) -> None:
    if reply.get("ok") != 1:
        raise ScramError(f"{reply.get('errmsg', 'login refused')} (code {reply.get('code')})")
    if not isinstance(reply.get("payload"), bytes):
        raise ScramError("the server's reply carries no SCRAM payload")
