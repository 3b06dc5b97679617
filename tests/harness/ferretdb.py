"""FerretDB on loopback: a MongoDB-compatible server nobody here wrote (Go, its data in SQLite
files), as a `platform: local` member. Built by .ci/install-ferretdb (pinned version) into
.cache/tools; started on a free port with its data directory under faultfs when asked, so that
storage faults and power loss reach a real third-party storage stack; stopped after, whichever
process then listens on its port (a run restarts it with the member's `start` command)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rsdrill.connection import ConnectOptions, answers_hello
from rsdrill.faultfs.mount import mount, unmount
from rsdrill.platforms.machine.local_hosts import listening_pid
from rsdrill.platforms.sandbox.hosts import free_port_base
from tests.harness.members import wait_until
from tests.harness.processes import ensure_built, stop

ROOT = Path(__file__).resolve().parents[2]
FERRETDB = ROOT / ".cache" / "tools" / "ferretdb"
INSTALL = ROOT / ".ci" / "install-ferretdb"
START_TIMEOUT_S = 30.0
# The MongoDB version FerretDB v1.24 claims in buildInfo (its build/version/mongodb.txt).
CLAIMED_VERSION = "7.0.42"


@dataclass(frozen=True)
class Certificates:
    """A CA and what it signed, by the openssl CLI (not rsdrill's own generator): the server's
    certificate for 127.0.0.1, a client's (certificate and key in one file, as
    tlsCertificateKeyFile wants), and a client certificate from another CA."""

    ca: Path
    server: Path
    server_key: Path
    client: Path
    stranger: Path


@dataclass(frozen=True)
class FerretDB:
    host: str  # 127.0.0.1:PORT
    start: str  # the shell command that starts it: the local member's `start`
    dbpath: Path  # its SQLite files
    faultfs: bool  # dbpath is a faultfs mount (tracking unsynced writes)
    repl_set_name: str | None  # the one-member replica set it claims in hello, if any
    tls: Certificates | None  # TLS only, a client certificate required
    user: tuple[str, str] | None  # the SCRAM user it requires (name, password)

    @property
    def uri(self) -> str:
        return self.uri_as(self.user)

    def uri_as(self, user: tuple[str, str] | None, client: Path | None = None) -> str:
        """The URI with this login (percent-encoded) and client certificate (default: the CA's
        own client)."""
        login = f"{quote(user[0], safe='')}:{quote(user[1], safe='')}@" if user else ""
        query = [f"replicaSet={self.repl_set_name}"] if self.repl_set_name else []
        if self.tls is not None:
            query += ["tls=true", f"tlsCAFile={self.tls.ca}",
                      f"tlsCertificateKeyFile={client or self.tls.client}"]  # fmt: skip
        return f"mongodb://{login}{self.host}/" + (f"?{'&'.join(query)}" if query else "")

    def target(self, topology: str = "standalone") -> dict[str, Any]:
        """A `platform: local` target naming this server as its one member."""
        member: dict[str, Any] = {"host": self.host, "start": self.start,
                                  "dbpath": str(self.dbpath)}  # fmt: skip
        if self.faultfs:
            member["faultfs"] = str(self.dbpath)
        return {"platform": "local", "topology": topology, "uri": self.uri, "members": [member]}

    def pid(self) -> int | None:
        return listening_pid(int(self.host.rsplit(":", 1)[1]))


@contextmanager
def ferretdb(directory: Path, *, faultfs: bool = False, sqlite_pragmas: str = "",
             repl_set_name: str | None = None, tls: bool = False,
             user: tuple[str, str] | None = None) -> Iterator[FerretDB]:  # fmt: skip
    """FerretDB on 127.0.0.1 and a free port, its SQLite files in `directory`/data (under a
    faultfs mount with `faultfs`), SQLite URI query `sqlite_pragmas` (e.g.
    "_pragma=synchronous(off)"), claiming a one-member replica set with `repl_set_name`;
    `tls`: TLS only, with certificates made in `directory`/tls, clients' required; `user`:
    logins required (FerretDB's SCRAM-SHA-256 authentication), this user created at start."""
    binary = ensure_built(FERRETDB, INSTALL)
    port = free_port_base(1)
    dbpath, state = directory / "data", directory / "state"
    dbpath.mkdir(parents=True)
    state.mkdir()
    url = f"file:{dbpath}/" + (f"?{sqlite_pragmas}" if sqlite_pragmas else "")
    certificates = make_certificates(directory / "tls") if tls else None
    listen = [f"--listen-addr=127.0.0.1:{port}"]
    if certificates is not None:
        listen = ["--listen-addr=", f"--listen-tls=127.0.0.1:{port}",
                  f"--listen-tls-cert-file={certificates.server}",
                  f"--listen-tls-key-file={certificates.server_key}",
                  f"--listen-tls-ca-file={certificates.ca}"]  # fmt: skip
    args = [str(binary), "--handler=sqlite", f"--sqlite-url={url}", f"--state-dir={state}",
            *listen, "--debug-addr=-", "--telemetry=disable", "--log-level=WARN"]  # fmt: skip
    if repl_set_name:
        args.append(f"--repl-set-name={repl_set_name}")
    if user is not None:
        args.append("--test-enable-new-auth")
    # The member's restart command: the user exists by then (setup only creates it once).
    server = FerretDB(f"127.0.0.1:{port}", shlex.join(args), dbpath, faultfs, repl_set_name,
                      certificates, user)  # fmt: skip
    if user is not None:
        args += [f"--setup-username={user[0]}", f"--setup-password={user[1]}",
                 "--setup-database=admin"]  # fmt: skip
    with ExitStack() as stack:
        if faultfs:
            mount(dbpath, dbpath, directory / "faultfs-state", track_unsynced=True)
            stack.callback(unmount, dbpath)
        stack.callback(_stop_listener, server)
        with (directory / "ferretdb.log").open("ab") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        stack.callback(stop, proc)
        _wait_until_it_answers(server, proc)
        yield server


def _wait_until_it_answers(server: FerretDB, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    options = ConnectOptions.from_uri(server.uri)
    while not answers_hello(server.host, timeout_s=0.5, options=options):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"FerretDB did not start (see {server.dbpath.parent}/ferretdb.log)")
        time.sleep(0.05)


def restart_cleanly(server: FerretDB) -> None:
    """SIGTERM, then started again with its `start` command: SQLite checkpoints its
    write-ahead log when FerretDB closes it, so everything written so far is on disk."""
    pid = server.pid()
    assert pid is not None, f"nothing listens on {server.host}"
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: server.pid() is None, START_TIMEOUT_S, f"FerretDB on {server.host} to stop")
    with (server.dbpath.parent / "ferretdb.log").open("ab") as log:
        proc = subprocess.Popen(server.start, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    _wait_until_it_answers(server, proc)


def _stop_listener(server: FerretDB) -> None:
    """Whatever process serves the port now: the first one, or one a run restarted."""
    pid = server.pid()
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


def make_certificates(directory: Path) -> Certificates:
    """A throw-away CA, the server's certificate for 127.0.0.1 and two clients', by openssl."""
    directory.mkdir(parents=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60,
                       cwd=directory)  # fmt: skip

    def signed(name: str, subject: str, ca: str, extensions: str | None = None) -> None:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout",
                f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
        extra = ["-extfile", extensions] if extensions else []
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-days", "1", "-out", f"{name}.pem", *extra)  # fmt: skip

    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                f"/CN={ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem")  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    signed("server", "/CN=127.0.0.1", "ca", "san.ext")
    for name, ca in (("client", "ca"), ("stranger", "other-ca")):
        signed(name, f"/CN={name}/O=rsdrill-tests", ca)
        both = directory / f"{name}-with-key.pem"
        both.write_text((directory / f"{name}.pem").read_text()
                        + (directory / f"{name}.key").read_text())  # fmt: skip
    return Certificates(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client-with-key.pem",
        directory / "stranger-with-key.pem",
    )
