"""The one place rsdrill talks to AWS: boto3 clients built from the standard credential chain,
adaptive retries for throttling, waits with deadlines, and AWS errors turned into one readable
line (`UnauthorizedOperation: ...`) with no secret in it.

boto3 is imported here, lazily (inside functions), so `rsdrill --help` and every other platform
stay free of it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from rsdrill.platforms.base import InjectionError

if TYPE_CHECKING:
    from rsdrill.platforms.ec2.options import Ec2Platform

# Retries of throttled calls (RequestLimitExceeded, Throttling...), with backoff; adaptive mode
# also paces the client itself once AWS starts throttling it.
MAX_ATTEMPTS = 8
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
# Values that must never appear in a message, a journal or a report.
_SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")

_HINTS = {
    "UnauthorizedOperation": "the credentials may not make this call (see the IAM policy in "
    "docs/platforms/ec2.md)",
    "AccessDenied": "the credentials may not make this call (see the IAM policy in "
    "docs/platforms/ec2.md)",
    "AccessDeniedException": "the credentials may not make this call (see the IAM policy in "
    "docs/platforms/ec2.md)",
    "AuthFailure": "AWS could not validate the credentials found in boto3's chain "
    "(environment, profile, instance role)",
    "InvalidClientTokenId": "the access key is not known to AWS",
    "SignatureDoesNotMatch": "the secret key does not match the access key",
    "ExpiredToken": "the session token has expired: refresh the credentials",
    "VolumeModificationRateExceeded": "AWS allows one modification per volume per 6 hours",
}


class AwsError(InjectionError):
    """An AWS call failed; the message is one line: `Code: what happened (hint)`."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(scrub(message))
        self.code = code


def scrub(text: str) -> str:
    """`text` with the value of every AWS secret in the environment masked."""
    for name in _SECRET_VARIABLES:
        value = os.environ.get(name)
        if value and len(value) >= 8:
            text = text.replace(value, "***")
    return text


@dataclass(frozen=True)
class Connection:
    """How to reach EC2: only non-secret settings (they go into the journal as they are)."""

    region: str
    profile: str | None = None
    endpoint_url: str | None = None
    poll_interval: float = 2.0
    wait_timeout: float = 300.0

    def to_action(self) -> dict[str, Any]:
        return {"connection": asdict(self)}

    @classmethod
    def from_action(cls, action: dict[str, Any]) -> Connection:
        return cls(**action["connection"])


# The AWS services rsdrill calls (boto3's client() is typed per service name).
Service = Literal["ec2", "fis", "ssm"]


@dataclass
class Aws:
    """EC2 (and FIS) clients for one connection; calls raise AwsError with a clear message."""

    conn: Connection
    _clients: dict[Service, Any] = field(default_factory=dict)

    def client(self, service: Service) -> Any:
        if service not in self._clients:
            self._clients[service] = _make_client(self.conn, service)
        return self._clients[service]

    def ec2(self, operation: str, **params: Any) -> dict[str, Any]:
        return self.call("ec2", operation, **params)

    def fis(self, operation: str, **params: Any) -> dict[str, Any]:
        return self.call("fis", operation, **params)

    def call(self, service: Service, operation: str, **params: Any) -> dict[str, Any]:
        with aws_errors(f"{service}:{_api_name(operation)}", self.conn):
            return getattr(self.client(service), operation)(**params)

    def dry_run(self, operation: str, **params: Any) -> str | None:
        """Ask EC2 whether the call would be allowed (DryRun): None if so, else the reason.

        Only a refusal of the credentials counts: other answers (a volume in use, say) are
        about the resource's state, which the real call will meet later.
        """
        try:
            self.ec2(operation, DryRun=True, **params)
        except AwsError as exc:
            if exc.code == "DryRunOperation":
                return None
            if exc.code in _CREDENTIAL_CODES:
                return str(exc)
            return None
        return None

    def wait(
        self, what: str, check: Callable[[], tuple[bool, str]], timeout_s: float | None = None
    ) -> str:
        """Poll `check` (done?, state seen) until done; AwsError once the deadline passes."""
        timeout = self.conn.wait_timeout if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        while True:
            done, seen = check()
            if done:
                return seen
            if time.monotonic() >= deadline:
                raise AwsError(f"waiter timeout: {what} not reached within {timeout:g}s "
                               f"(last seen: {seen})", "WaiterTimeout")  # fmt: skip
            time.sleep(min(self.conn.poll_interval, max(deadline - time.monotonic(), 0.01)))

    def poll(self, what: str, check: Callable[[], tuple[bool, str]], timeout_s: float) -> bool:
        """Like `wait`, but False instead of an error at the deadline (for verify())."""
        try:
            self.wait(what, check, timeout_s)
        except AwsError as exc:
            if exc.code == "WaiterTimeout":
                return False
            raise
        return True

    @cached_property
    def partition(self) -> str:
        if self.conn.region.startswith("cn-"):
            return "aws-cn"
        return "aws-us-gov" if self.conn.region.startswith("us-gov-") else "aws"


_THROTTLED = {
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
}  # fmt: skip
_CREDENTIAL_CODES = {
    "UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "AuthFailure",
    "InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", "OptInRequired",
}  # fmt: skip


def _make_client(conn: Connection, service: Service) -> Any:
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError
    except ImportError:
        raise AwsError("boto3 is not installed: pip install 'rsdrill[ec2]'", "NoBoto3") from None

    config = Config(
        retries={"mode": "adaptive", "total_max_attempts": MAX_ATTEMPTS},
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        user_agent_extra="rsdrill",
    )
    try:
        session = boto3.session.Session(profile_name=conn.profile, region_name=conn.region)
        return session.client(service, endpoint_url=conn.endpoint_url, config=config)
    except BotoCoreError as exc:  # e.g. ProfileNotFound
        raise AwsError(f"{type(exc).__name__}: {exc}", type(exc).__name__) from None


def _api_name(operation: str) -> str:
    return "".join(part.capitalize() for part in operation.split("_"))


@contextmanager
def aws_errors(what: str, conn: Connection) -> Iterator[None]:
    """Turn botocore's exceptions into one-line AwsErrors (no traceback, no secret)."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
    )

    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or exc.response.get("ResponseMetadata", {})
                   .get("HTTPStatusCode", "Error"))  # fmt: skip
        message = str(error.get("Message") or "")
        if message.lstrip().startswith("<"):  # an HTML page: the endpoint lacks this API
            message = "the endpoint does not implement this call"
        # AWS appends a long encoded authorization message: the first sentence is enough.
        message = message.split(" Encoded authorization failure message:")[0]
        hint = _HINTS.get(code)
        if code in _THROTTLED:
            hint = f"still throttled after {MAX_ATTEMPTS} attempts with backoff"
        text = f"{code}: {what}: {message}" + (f" ({hint})" if hint else "")
        raise AwsError(text, code) from None
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise AwsError(f"NoCredentials: {what}: {exc}; boto3's chain found none (environment "
                       "variables, shared config/credentials files with `profile`, instance "
                       "role)", "NoCredentials") from None  # fmt: skip
    except NoRegionError:
        raise AwsError(f"NoRegion: {what}: no region", "NoRegion") from None
    except EndpointConnectionError as exc:
        raise AwsError(f"EndpointConnectionError: {what}: cannot reach "
                       f"{conn.endpoint_url or exc.kwargs.get('endpoint_url')}",
                       "EndpointConnectionError") from None  # fmt: skip
    except BotoCoreError as exc:
        raise AwsError(f"{type(exc).__name__}: {what}: {exc}", type(exc).__name__) from None


def connection(platform: Ec2Platform) -> Connection:
    return Connection(
        region=platform.region,
        profile=platform.profile,
        endpoint_url=platform.endpoint_url,
        poll_interval=platform.poll_interval,
        wait_timeout=platform.wait_timeout,
    )
