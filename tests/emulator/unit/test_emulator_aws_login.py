"""The emulator's half of MONGODB-AWS: what it refuses before it would ask STS (nothing here
reaches an STS; tests/e2e/test_aws_login.py has the whole login against moto's)."""

from __future__ import annotations

import asyncio
import secrets

import bson
import pytest
from bson.binary import Binary

from rsdrill_emulator.aws_login import STS_HOST, AwsConversation, AwsLoginError, user_of

NOWHERE = "http://127.0.0.1:9"  # discard port: a request sent there would fail, not pass
SIGNED = "content-length;content-type;host;x-amz-date;x-mongodb-gs2-cb-flag;x-mongodb-server-nonce"


def _first(conversation: AwsConversation, nonce: bytes, flag: int = ord("n")) -> dict[str, object]:
    return dict(bson.decode(conversation.first(bson.encode({"r": Binary(nonce), "p": flag}))))


def test_an_assumed_roles_session_logs_in_as_the_roles_star_user() -> None:
    session = "arn:aws:sts::123456789012:assumed-role/drill-role/game-day"
    assert user_of(session) == "arn:aws:sts::123456789012:assumed-role/drill-role/*"
    user = "arn:aws:iam::123456789012:user/drill"
    assert user_of(user) == user


def test_the_server_nonce_extends_the_clients_and_names_the_sts_host() -> None:
    nonce = secrets.token_bytes(32)
    reply = _first(AwsConversation(NOWHERE), nonce)
    server_nonce = reply["s"]
    assert isinstance(server_nonce, bytes) and len(server_nonce) == 64
    assert server_nonce.startswith(nonce) and server_nonce != nonce * 2
    assert reply["h"] == STS_HOST


@pytest.mark.parametrize(("nonce", "flag"), [(b"short", ord("n")), (bytes(32), ord("p"))])
def test_a_bad_client_first_message_is_refused(nonce: bytes, flag: int) -> None:
    with pytest.raises(AwsLoginError):
        _first(AwsConversation(NOWHERE), nonce, flag)


@pytest.mark.parametrize(
    ("signed", "token", "missing"),
    [
        (SIGNED.replace(";x-mongodb-server-nonce", ""), None, "x-mongodb-server-nonce"),
        (SIGNED, "session-token", "x-amz-security-token"),
    ],
)
def test_a_signature_that_does_not_cover_the_nonce_or_token_is_refused(
    signed: str, token: str | None, missing: str
) -> None:
    conversation = AwsConversation(NOWHERE)
    _first(conversation, secrets.token_bytes(32))
    authorization = (
        "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/sts/aws4_request, "
        f"SignedHeaders={signed}, Signature=00"
    )
    final = {"a": authorization, "d": "20260101T000000Z"}
    if token is not None:
        final["t"] = token
    with pytest.raises(AwsLoginError, match=missing):
        asyncio.run(conversation.final(bson.encode(final)))
