"""EC2 tests run against moto's server on loopback (one per session) with credentials from the
environment only: a recognisable fake secret that the secrets tests look for everywhere."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.moto_ec2 import REGION, SECRET, Member, client, make_member, moto_server

from rsdrill.platforms.ec2.injectors import Aws, Connection


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("moto") / "moto_server.log"
    with moto_server(log) as endpoint:
        yield endpoint


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """boto3's chain finds these keys in the environment and no file of the machine's."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIARSDRILLTESTKEY01")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ec2(moto_endpoint: str) -> Any:
    """A plain boto3 EC2 client: how the tests look at the account's real state."""
    return client(moto_endpoint)


@pytest.fixture
def aws(moto_endpoint: str) -> Aws:
    """rsdrill's client, polling fast (moto changes states at once)."""
    return Aws(Connection(REGION, endpoint_url=moto_endpoint, poll_interval=0.05,
                          wait_timeout=10.0))  # fmt: skip


@pytest.fixture
def member(ec2: Any) -> Callable[..., Member]:
    def make(host: str | None = None, **options: Any) -> Member:
        # moto's state lives as long as the session: every test's members get their own names.
        return make_member(ec2, host or f"m-{secrets.token_hex(4)}.internal:27017", **options)

    return make
