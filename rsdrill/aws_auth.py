"""MONGODB-AWS, the client side: the drivers' own conversation (pymongo-auth-aws, what pymongo
itself logs in with), carried over rsdrill's member connections.

The credentials are the URI's (access key id as the user, secret access key as the password,
`authMechanismProperties=AWS_SESSION_TOKEN:...`), or, without a user in the URI, the ones the
AWS SDK's chain finds (environment, shared files, ECS/EC2 metadata), as drivers do. The secret
never leaves this process: the server receives a SigV4 signature of an STS GetCallerIdentity
request over its own nonce, and asks STS who signed it.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

import bson
from bson.binary import Binary

from rsdrill.scram import Credentials

MECHANISM = "MONGODB-AWS"
INSTALL_HINT = "pip install 'rsdrill[aws]' (pymongo-auth-aws, which pymongo needs for it too)"


class AwsAuthError(Exception):
    """No credentials could be found, or the server's messages break the conversation."""


def available() -> bool:
    """Whether pymongo-auth-aws is installed."""
    try:
        import pymongo_auth_aws  # noqa: F401
    except ImportError:
        return False
    return True


def aws_conversation(
    credentials: Credentials,
) -> Generator[dict[str, Any], dict[str, Any], None]:
    """The saslStart/saslContinue commands of one MONGODB-AWS login (on `$external`), as
    `rsdrill.scram.sasl_conversation`: send each command it yields, `send()` back the reply.
    Raises AwsAuthError when the server refuses or the credentials cannot be had."""
    import pymongo_auth_aws

    class Context(pymongo_auth_aws.AwsSaslContext):
        # pymongo-auth-aws leaves BSON to its caller.
        def binary_type(self) -> type[Binary]:
            return Binary

        def bson_encode(self, doc: Mapping[str, Any]) -> bytes:
            return bson.encode(doc)

        def bson_decode(self, data: bytes) -> Mapping[str, Any]:
            return bson.decode(data)

    user = credentials.user or None  # none: the AWS SDK's credential chain
    context = Context(
        pymongo_auth_aws.AwsCredential(user, credentials.password or None, credentials.token)
    )
    try:
        reply = yield {"saslStart": 1, "mechanism": MECHANISM, "payload": context.step(None)}
        _check(reply)
        conversation = reply.get("conversationId")
        while not reply.get("done"):
            payload = context.step(reply.get("payload"))
            reply = yield {"saslContinue": 1, "conversationId": conversation, "payload": payload}
            _check(reply)
    except pymongo_auth_aws.PyMongoAuthAwsError as exc:
        raise AwsAuthError(str(exc)) from None


def _check(reply: dict[str, Any]) -> None:
    if reply.get("ok") != 1:
        raise AwsAuthError(f"{reply.get('errmsg', 'login refused')} (code {reply.get('code')})")
