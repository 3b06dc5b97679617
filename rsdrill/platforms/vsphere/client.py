"""The one place rsdrill talks to vCenter: a pyVmomi session built from non-secret settings and
a password read from the environment, every task waited for with a deadline, and vim faults
turned into one readable line (`NoPermission: ...`) with no password in it.

pyVmomi is imported here, lazily (inside functions), so `rsdrill --help` and every other
platform stay free of it.
"""

from __future__ import annotations

import http.client
import os
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.vsphere.options import DEFAULT_PASSWORD_VARIABLES

if TYPE_CHECKING:
    from rsdrill.platforms.vsphere.options import VspherePlatform

# A socket that hears nothing for this long is given up (vCenter answers calls in seconds;
# tasks are polled, not waited on by one long call).
SOCKET_TIMEOUT_S = 30
TASK_POLL_S = 0.1
_MIN_SCRUBBED = 6

T = TypeVar("T")


class VsphereError(InjectionError):
    """A vCenter call failed; the message is one line: `Fault: what happened (hint)`."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Connection:
    """How to reach vCenter: only non-secret settings (they go into the journal as they are)."""

    host: str
    user: str
    port: int = 443
    # The NAME of the environment variable holding the password (None: the default names).
    password_env: str | None = None
    insecure: bool = False
    ca_file: str | None = None
    datacenter: str | None = None
    task_timeout: float = 120.0

    @property
    def address(self) -> str:
        return self.host if self.port == 443 else f"{self.host}:{self.port}"

    def password_variables(self) -> tuple[str, ...]:
        return (self.password_env,) if self.password_env else DEFAULT_PASSWORD_VARIABLES

    def password_source(self) -> tuple[str, str] | None:
        """(variable name, password) from the first variable that is set, or None."""
        for name in self.password_variables():
            value = os.environ.get(name)
            if value:
                return name, value
        return None

    def password(self) -> str:
        found = self.password_source()
        if found:
            return found[1]
        names = " or ".join(self.password_variables())
        raise VsphereError(f"NoPassword: the vCenter password for {self.user}@{self.address} is "
                           f"read from the environment variable {names}, which is not set",
                           "NoPassword")  # fmt: skip

    def to_action(self) -> dict[str, Any]:
        return {"vcenter": asdict(self)}

    @classmethod
    def from_action(cls, action: dict[str, Any]) -> Connection:
        return cls(**action["vcenter"])


_HINTS = {
    "InvalidLogin": "wrong user or password",
    "NoPermission": "the user's role lacks this privilege (see docs/platforms/vsphere.md)",
    "NotAuthenticated": "the session expired or was closed",
    "ManagedObjectNotFound": "it no longer exists (deleted, or unregistered and re-added)",
    "MethodNotFound": "this vCenter or ESXi host does not implement the call",
    "TaskInProgress": "another task is running on it: try again once it has finished",
}


@dataclass
class Vsphere:
    """A pyVmomi session for one connection; calls raise VsphereError with a clear message."""

    conn: Connection
    _si: Any = field(default=None, repr=False)
    _content: Any = field(default=None, repr=False)

    # -- the session ------------------------------------------------------------------------

    @property
    def content(self) -> Any:
        """The service content (logging in on first use)."""
        if self._si is None:
            self._si = self._connect()
            with self.errors("read the service content"):
                self._content = self._si.RetrieveContent()
        return self._content

    @property
    def stub(self) -> Any:
        _ = self.content
        return self._si._stub

    def _connect(self) -> Any:
        from pyVim.connect import SmartConnect

        with self.errors(f"login to {self.conn.address} as {self.conn.user}"):
            si = SmartConnect(
                host=self.conn.host,
                port=self.conn.port,
                user=self.conn.user,
                pwd=self.conn.password(),
                sslContext=self._tls(),
                httpConnectionTimeout=SOCKET_TIMEOUT_S,
            )
        return si

    def _tls(self) -> ssl.SSLContext:
        if self.conn.insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        try:
            return ssl.create_default_context(cafile=self.conn.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise VsphereError(f"TLS: cannot read ca_file {self.conn.ca_file}: {exc}",
                               "TLS") from None  # fmt: skip

    def relogin_once(self, operation: Callable[[], T]) -> T:
        """`operation()`, done again after a fresh login if vCenter says the session is no
        longer valid (it expires when idle for long, e.g. while a long fault is in force)."""
        try:
            return operation()
        except VsphereError as exc:
            if exc.code != "NotAuthenticated":
                raise
        self.close()
        return operation()

    def close(self) -> None:
        if self._si is None:
            return
        from pyVim.connect import Disconnect

        with suppress(Exception):  # a session that cannot log out expires by itself
            Disconnect(self._si)
        self._si = self._content = None

    # -- errors -----------------------------------------------------------------------------

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Turn pyVmomi's faults, TLS and socket errors into one-line VsphereErrors."""
        from pyVmomi import vmodl

        try:
            yield
        except vmodl.MethodFault as fault:
            raise self.explain(fault, what) from None
        except ssl.SSLCertVerificationError as exc:
            raise VsphereError(
                f"TLS: {what}: the certificate of {self.conn.address} is not trusted "
                f"({exc.verify_message}); give the CA in `ca_file`, or set `insecure: true` "
                "knowingly", "TLS") from None  # fmt: skip
        except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
            text = _scrub(str(exc) or type(exc).__name__, self.conn)
            raise VsphereError(f"Unreachable: {what}: cannot reach vCenter {self.conn.address}: "
                               f"{text}", "Unreachable") from None  # fmt: skip

    def explain(self, fault: Any, what: str) -> VsphereError:
        """A vim fault as `Name: what: detail (hint)`."""
        name = type(fault).__name__.rsplit(".", 1)[-1]
        detail = str(getattr(fault, "msg", "") or "").strip()
        if name == "NoPermission":
            detail = f"privilege {fault.privilegeId} is missing" + (
                f" on {_moref(fault.object)}" if fault.object is not None else ""
            )
        elif name == "InvalidPowerState":
            detail = (f"the VM is {fault.existingState or 'in another state'}, the call needs "
                      f"{fault.requestedState or 'another power state'}")  # fmt: skip
        elif name == "ManagedObjectNotFound":
            detail = f"{_moref(fault.obj)} not found"
        elif name == "InvalidLogin":
            source = self.conn.password_source()
            detail = f"user {self.conn.user}, password from ${source[0] if source else '?'}"
        hint = _HINTS.get(name)
        text = f"{name}: {what}" + (f": {detail}" if detail else "")
        text += f" ({hint})" if hint else ""
        return VsphereError(_scrub(text, self.conn), name)

    # -- tasks ------------------------------------------------------------------------------

    def call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        with self.errors(what):
            return method(*args, **kwargs)

    def run_tasks(self, what: str, tasks: list[tuple[str, Any]]) -> list[Any]:
        """Wait for tasks already started, each described; their results, in order.

        All are waited for, together, under one deadline; the first failure is raised once
        every task has ended (so none is left running unobserved).
        """
        from pyVmomi import vim

        deadline = time.monotonic() + self.conn.task_timeout
        results: list[Any] = [None] * len(tasks)
        pending = dict(enumerate(tasks))
        failure: VsphereError | None = None
        while pending:
            for i, (label, task) in list(pending.items()):
                each = f"{what} {label}" if label else what
                with self.errors(each):
                    info = task.info
                if info.state == vim.TaskInfo.State.success:
                    results[i] = info.result
                    del pending[i]
                elif info.state == vim.TaskInfo.State.error:
                    failure = failure or self.explain(info.error, each)
                    del pending[i]
            if not pending:
                break
            if time.monotonic() > deadline:
                late = ", ".join(f"{label} ({task._moId})" for label, task in pending.values())
                raise VsphereError(f"TaskTimeout: {what}: not finished within "
                                   f"{self.conn.task_timeout:g}s: {late} (the task may still "
                                   "complete in vCenter)", "TaskTimeout")  # fmt: skip
            time.sleep(TASK_POLL_S)
        if failure is not None:
            raise failure
        return results

    def run_task(self, what: str, start: Any, *args: Any, **kwargs: Any) -> Any:
        """Start one task (`start(*args, **kwargs)`) and wait for it."""
        task = self.call(what, start, *args, **kwargs)
        return self.run_tasks(what, [("", task)])[0]

    def poll(self, check: Any, timeout_s: float, interval_s: float = 0.2) -> bool:
        """Call `check()` until it is true or `timeout_s` has passed."""
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                return False
            time.sleep(interval_s)
        return True

    # -- inventory --------------------------------------------------------------------------

    def root(self) -> Any:
        """Where VMs and hosts are looked for: the configured datacenter, or everything."""
        content = self.content
        if self.conn.datacenter is None:
            return content.rootFolder
        from pyVmomi import vim

        for entity in self.call("list datacenters", lambda: content.rootFolder.childEntity):
            if isinstance(entity, vim.Datacenter) and entity.name == self.conn.datacenter:
                return entity
        raise VsphereError(f"NotFound: datacenter {self.conn.datacenter} does not exist on "
                           f"{self.conn.address}", "NotFound")  # fmt: skip

    def collect(self, kind: Any, properties: list[str]) -> list[tuple[Any, dict[str, Any]]]:
        """Every object of type `kind` under `root()` with the given properties, in one
        property-collector round trip per page (not one call per object and property)."""
        from pyVmomi import vmodl

        content = self.content
        collector = content.propertyCollector
        view = self.call("create a container view", content.viewManager.CreateContainerView,
                         self.root(), [kind], True)  # fmt: skip
        try:
            spec = vmodl.query.PropertyCollector.FilterSpec(
                objectSet=[vmodl.query.PropertyCollector.ObjectSpec(
                    obj=view, skip=True,
                    selectSet=[vmodl.query.PropertyCollector.TraversalSpec(
                        name="view", path="view", skip=False, type=type(view))])],
                propSet=[vmodl.query.PropertyCollector.PropertySpec(
                    type=kind, pathSet=properties)],
            )  # fmt: skip
            found: list[tuple[Any, dict[str, Any]]] = []
            with self.errors(f"list {kind.__name__.rsplit('.', 1)[-1]} objects"):
                page = collector.RetrievePropertiesEx(
                    [spec], vmodl.query.PropertyCollector.RetrieveOptions()
                )
                while page is not None:
                    found += [(o.obj, {p.name: p.val for p in o.propSet}) for o in page.objects]
                    page = (collector.ContinueRetrievePropertiesEx(page.token)
                            if page.token else None)  # fmt: skip
            return found
        finally:
            with suppress(Exception):
                view.Destroy()


def _moref(obj: Any) -> str:
    name = getattr(obj, "_moId", None)
    return f"{type(obj).__name__.rsplit('.', 1)[-1]} {name}" if name else str(obj)


def _scrub(text: str, conn: Connection) -> str:
    """`text` with the password masked, should any library have echoed it (short passwords
    are left alone: masking every "pw" in a message would garble it and protect little)."""
    source = conn.password_source()
    if source and len(source[1]) >= _MIN_SCRUBBED:
        return text.replace(source[1], "***")
    return text


def connection(platform: VspherePlatform) -> Connection:
    return Connection(
        host=platform.host,
        user=platform.user,
        port=platform.port,
        password_env=platform.password_env,
        insecure=platform.insecure,
        ca_file=platform.ca_file,
        datacenter=platform.datacenter,
        task_timeout=platform.task_timeout,
    )
