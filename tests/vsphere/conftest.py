"""vSphere tests run against govmomi's vCenter simulator (vcsim) on loopback, one per session,
with a random password that rsdrill reads from the environment only (and the secrets checks
look for everywhere)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.vcsim import Vcsim, create_vm, esxi_hosts, session_of, vcsim

from rsdrill.platforms.vsphere.injectors import Vsphere, connection
from rsdrill.platforms.vsphere.options import MemberVms, VspherePlatform

PASSWORD_ENV = "RSDRILL_VSPHERE_PASSWORD"


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vcsim]:
    log = tmp_path_factory.mktemp("vcsim") / "vcsim.log"
    with vcsim(log) as server:
        yield server


@pytest.fixture(scope="session")
def si(sim: Vcsim) -> Iterator[Any]:
    """The test's own vCenter session: how the tests look at the VMs' real state."""
    with session_of(sim) as opened:
        yield opened


@pytest.fixture(autouse=True)
def vsphere_password(monkeypatch: pytest.MonkeyPatch, sim: Vcsim) -> None:
    monkeypatch.setenv(PASSWORD_ENV, sim.password)
    monkeypatch.delenv("VSPHERE_PASSWORD", raising=False)


@pytest.fixture
def platform(sim: Vcsim) -> Callable[..., VspherePlatform]:
    """The target.vsphere section pointing at vcsim (TLS unverified: its certificate is
    self-signed), members found by guest hostname unless told otherwise."""

    def make(**overrides: Any) -> VspherePlatform:
        fields: dict[str, Any] = {"host": sim.host, "port": sim.port, "user": sim.user,
                                  "insecure": True, "task_timeout": 20.0,
                                  "vms": MemberVms()}  # fmt: skip
        return VspherePlatform(**{**fields, **overrides})

    return make


@pytest.fixture
def client(platform: Callable[..., VspherePlatform]) -> Iterator[Vsphere]:
    session = Vsphere(connection(platform()))
    yield session
    session.close()


@dataclass
class MemberVm:
    member: str
    vm: Any


@pytest.fixture
def member_vm(si: Any) -> Callable[..., MemberVm]:
    """A VM standing for one member's host: guest hostname m-<random>.example.com, on the
    cluster's ESXi host `host` (index); the member is that hostname with port 27017."""

    def make(host: int = 0, power_on: bool = True) -> MemberVm:
        name = f"m-{secrets.token_hex(4)}"
        vm = create_vm(si, name, esxi_hosts(si)[host], guest_hostname=f"{name}.example.com")
        if not power_on:
            from harness.vcsim import wait_task

            wait_task(vm.PowerOffVM_Task())
        return MemberVm(f"{name}.example.com:27017", vm)

    return make


@pytest.fixture
def journal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RSDRILL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
