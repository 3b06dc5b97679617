"""Every socket rsdrill itself opens to a member: TLS, login, the drivers' handshake, deadlines.

The failover and recovery probes, the guards, member selection, stepdown and lag ask each member
directly what it thinks, every 10 to 100 ms. pymongo cannot do that: its server selection waits
for its monitor, which re-checks a server at most every 500 ms after an error (10 s between
heartbeats otherwise), so a poller built on it would see a new primary up to 0.5-10 s late.
This client speaks the wire protocol itself, holds one socket per member, reconnects at once and
bounds every command by one deadline. Everything else about reaching a member is taken from the
user's connection string exactly as pymongo reads it (pymongo's own URI parser, which also
resolves `mongodb+srv://` through dnspython): TLS options, the login and its mechanism, appName.

The handshake follows the drivers' specification: `hello` first; a server that answers
CommandNotFound (before 4.4.2 / 4.2.10, and some compatible servers) gets `isMaster` with
`helloOk: true`, and that choice is remembered per member for the rest of the process.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import platform
import socket
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import bson

from rsdrill import aws_auth, wire
from rsdrill.scram import MECHANISMS as SCRAM_MECHANISMS
from rsdrill.scram import Credentials, ScramClient, ScramError, sasl_conversation
from rsdrill.version import __version__

# What rsdrill's own connections can log in with; others are refused when the URI is read.
MECHANISMS = (*SCRAM_MECHANISMS, "MONGODB-X509", "PLAIN", aws_auth.MECHANISM)
# Mechanisms whose users live outside MongoDB: their source is `$external`.
_EXTERNAL = ("MONGODB-X509", "PLAIN", aws_auth.MECHANISM)
APP_NAME = "rsdrill"
COMMAND_NOT_FOUND = 59

_request_ids = itertools.count(1)


class SettingsError(ValueError):
    """The connection string cannot be used: an unreadable CA file, a key that does not load,
    an SRV name that does not resolve, an auth mechanism rsdrill cannot speak. Nothing was sent."""


class SecretNeeded(SettingsError):
    """A journaled action's member needs a secret the journal never holds: the connection
    string has to be given again (`rsdrill recover --uri`)."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"reaching it needs {what}, which the journal never holds: give the connection "
            "string again, `rsdrill recover --uri 'mongodb://USER:PASSWORD@HOST/?...'` (or "
            "in $RSDRILL_RECOVER_URI)"
        )


class WireClientError(Exception):
    """The member did not answer in time, refused, or answered something unusable."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class NotListening(WireClientError):
    """Nothing listens at the member's address (the connection was refused): its process is
    not running. A timeout is not this: a frozen, partitioned or loaded member times out."""


class AccessRefused(WireClientError):
    """The member is up but will not talk to us with these settings (login refused, TLS
    certificate rejected either way): retrying with the same settings cannot help."""


class LoginError(AccessRefused):
    """The member refused the login (wrong password, unknown user, unsupported mechanism)."""


class TlsError(AccessRefused):
    """The TLS handshake failed on a certificate: the member's is not trusted (or does not
    name it), or the member rejected ours."""


@dataclass(frozen=True)
class TlsSettings:
    """The URI's TLS options, with pymongo's meanings."""

    ca_file: str | None = None
    certificate_key_file: str | None = None
    certificate_key_password: str | None = field(default=None, repr=False)
    allow_invalid_hostnames: bool = False
    allow_invalid_certificates: bool = False

    def context(self) -> ssl.SSLContext:
        """The client context (built once per settings); SettingsError if a file is unusable."""
        return _tls_context(self)


@functools.lru_cache(maxsize=16)
def _tls_context(settings: TlsSettings) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.allow_invalid_certificates:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.check_hostname = not settings.allow_invalid_hostnames
        try:
            if settings.ca_file:
                context.load_verify_locations(cafile=settings.ca_file)
            else:
                context.load_default_certs()
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(f"tlsCAFile {settings.ca_file}: {_reason(exc)}") from None
    if settings.certificate_key_file:
        try:
            context.load_cert_chain(
                settings.certificate_key_file, password=settings.certificate_key_password
            )
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(
                f"tlsCertificateKeyFile {settings.certificate_key_file}: {_reason(exc)}"
            ) from None
    return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return f"not a usable certificate or key ({exc.reason})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


@dataclass(frozen=True)
class ConnectOptions:
    """How to reach a set's members: login, TLS, the name a DBA sees in currentOp."""

    credentials: Credentials | None = None
    tls: TlsSettings | None = None
    app_name: str = APP_NAME

    @classmethod
    def from_uri(cls, uri: str) -> ConnectOptions:
        """The options of a connection string; SettingsError names what cannot be used."""
        return parse_uri(uri).options

    def journaled(self) -> dict[str, Any]:
        """These settings as a journaled revert action keeps them, for `rsdrill recover` to
        reach the member again: TLS files and flags, the user and mechanism; a secret (a
        password, a key file's password, an AWS token) is never written, only marked as used."""
        saved: dict[str, Any] = {"app_name": self.app_name}
        if self.tls is not None:
            tls = self.tls
            saved["tls"] = {
                "ca_file": tls.ca_file,
                "certificate_key_file": tls.certificate_key_file,
                "certificate_key_password": bool(tls.certificate_key_password),
                "allow_invalid_hostnames": tls.allow_invalid_hostnames,
                "allow_invalid_certificates": tls.allow_invalid_certificates,
            }
        if self.credentials is not None:
            c = self.credentials
            saved["credentials"] = {
                "user": c.user, "source": c.source, "mechanism": c.mechanism,
                "password": bool(c.password), "token": bool(c.token),
            }  # fmt: skip
        return saved

    @classmethod
    def from_journal(cls, saved: Mapping[str, Any] | None, *, login: bool) -> ConnectOptions:
        """The settings `journaled` kept (none: plain, as journals before them). `login`: the
        action needs the login, not only the TLS handshake (hello answers without one); a login
        whose secret the journal does not hold raises SecretNeeded."""
        if not saved:
            return cls()
        tls = None
        if saved.get("tls"):
            t = saved["tls"]
            if t.get("certificate_key_password"):
                raise SecretNeeded("tlsCertificateKeyFilePassword")
            tls = TlsSettings(t.get("ca_file"), t.get("certificate_key_file"), None,
                              bool(t.get("allow_invalid_hostnames")),
                              bool(t.get("allow_invalid_certificates")))  # fmt: skip
        credentials = None
        if login and saved.get("credentials"):
            c = saved["credentials"]
            if c.get("password") or c.get("token"):
                raise SecretNeeded(f"the password of {c.get('user') or 'its user'}")
            credentials = Credentials(c.get("user") or "", "", c.get("source") or "admin",
                                      c.get("mechanism"))  # fmt: skip
        return cls(credentials, tls, saved.get("app_name") or APP_NAME)

    def describe(self) -> dict[str, Any]:
        """What a result states about the connection (no secret)."""
        mechanism = None
        if self.credentials is not None:
            mechanism = self.credentials.mechanism or "SCRAM (negotiated)"
        return {
            "tls": self.tls is not None,
            "tls_client_certificate": bool(self.tls and self.tls.certificate_key_file),
            "auth_mechanism": mechanism,
        }


GIVEN_OPTIONS = "given_options"
"""What `rsdrill recover --uri` adds to each action it carries out (never journaled): the
settings to reach the members with, secrets included."""


def action_options(action: Mapping[str, Any], *, login: bool) -> ConnectOptions:
    """How a journaled revert action reaches its member: the settings given to `rsdrill
    recover --uri`, else those journaled with it (`connect`, see `ConnectOptions.journaled`);
    SecretNeeded when those had a secret and `login` asks for the login."""
    given = action.get(GIVEN_OPTIONS)
    if isinstance(given, ConnectOptions):
        # Without the login when none is asked for: whether a member is up is asked with a
        # bare hello, and a wrong password would make an up member look down.
        return given if login else replace(given, credentials=None)
    return ConnectOptions.from_journal(action.get("connect"), login=login)


def carried(inner: dict[str, Any], outer: Mapping[str, Any]) -> dict[str, Any]:
    """An action nested in another (a restart within a revert), with the settings given to the
    outer one."""
    return {**inner, GIVEN_OPTIONS: outer[GIVEN_OPTIONS]} if GIVEN_OPTIONS in outer else inner


@dataclass(frozen=True)
class ParsedUri:
    """A connection string as pymongo reads it: its seeds (SRV resolved) and our options."""

    seeds: list[str]
    replica_set: str | None
    options: ConnectOptions


def parse_uri(uri: str) -> ParsedUri:
    """Read a `mongodb://` or `mongodb+srv://` string with pymongo's parser (SRV and TXT records
    resolved through dnspython); SettingsError with the cause (never the password)."""
    from pymongo.errors import ConfigurationError, InvalidURI
    from pymongo.uri_parser import parse_uri as pymongo_parse_uri

    from rsdrill.redact import redact_uri

    try:
        parsed = pymongo_parse_uri(uri)
    except FileNotFoundError as exc:
        # pymongo names the option but not the file: say which.
        raise SettingsError(f"{redact_uri(str(exc.strerror or exc))}: {_tls_files(uri)}") from None
    except (InvalidURI, ConfigurationError, ValueError, OSError) as exc:
        unknown = unknown_options(uri) if str(exc).startswith("Unknown option") else None
        raise SettingsError(unknown or redact_uri(str(exc))) from None
    # pymongo keeps some option names in camel case and lowers others: look them up lowered.
    opts = {key.lower(): value for key, value in parsed["options"].items()}
    seeds = [f"{host}:{port}" for host, port in parsed["nodelist"]]
    return ParsedUri(
        seeds,
        opts.get("replicaset"),
        ConnectOptions(
            credentials=_credentials(parsed, opts),
            tls=_tls(opts),
            app_name=opts.get("appname") or APP_NAME,
        ),
    )


def unknown_options(uri: str) -> str | None:
    """The URI's option names pymongo does not know, as a problem (None: every one known).
    pymongo's own message names none ("Unknown option. ... Refer to docstring."), which left a
    user to find the typo; a name is no secret, and no value is shown."""
    from pymongo.common import (
        URI_OPTIONS_ALIAS_MAP,
        URI_OPTIONS_DEPRECATION_MAP,
        URI_OPTIONS_VALIDATOR_MAP,
    )

    from rsdrill.suggest import did_you_mean

    known = {*URI_OPTIONS_VALIDATOR_MAP, *URI_OPTIONS_DEPRECATION_MAP}
    known |= {alias for aliases in URI_OPTIONS_ALIAS_MAP.values() for alias in aliases}
    known = {name.lower() for name in known}
    query = uri.partition("?")[2].replace(";", "&")
    names = [pair.partition("=")[0] for pair in query.split("&") if pair]
    unknown = [name for name in names if name.lower() not in known]
    if not unknown:
        return None
    guesses = [did_you_mean(name, URI_OPTIONS_VALIDATOR_MAP) for name in unknown]
    said = [f"{name!r}" + (f" (did you mean {guess!r}?)" if guess else "")
            for name, guess in zip(unknown, guesses, strict=True)]  # fmt: skip
    return f"unknown URI option{'s' if len(unknown) > 1 else ''} {', '.join(said)}"


def _tls_files(uri: str) -> str:
    """The TLS file options of a URI, for an error message."""
    from urllib.parse import parse_qsl, urlsplit

    query = dict(parse_qsl(urlsplit(uri).query))
    files = [f"{k}={v}" for k, v in query.items() if k.lower().endswith("file")]
    return ", ".join(files) or "a TLS file"


def _tls(opts: dict[str, Any]) -> TlsSettings | None:
    """TLS on when pymongo would turn it on: `tls`/`ssl`, SRV's default, or any tls file."""
    files = ("tlscertificatekeyfile", "tlscertificatekeyfilepassword", "tlscafile")
    enabled = opts.get("tls")
    if enabled is None:
        enabled = any(opts.get(name) for name in files)
    if not enabled:
        return None
    insecure = bool(opts.get("tlsinsecure"))
    settings = TlsSettings(
        ca_file=opts.get("tlscafile"),
        certificate_key_file=opts.get("tlscertificatekeyfile"),
        certificate_key_password=opts.get("tlscertificatekeyfilepassword"),
        allow_invalid_hostnames=insecure or bool(opts.get("tlsallowinvalidhostnames")),
        allow_invalid_certificates=insecure or bool(opts.get("tlsallowinvalidcertificates")),
    )
    settings.context()  # a file that cannot be used is the URI's error, found now
    return settings


def _credentials(parsed: dict[str, Any], opts: dict[str, Any]) -> Credentials | None:
    mechanism = opts.get("authmechanism")
    user = parsed.get("username")
    if mechanism is None and not user:
        return None
    if mechanism is not None and mechanism not in MECHANISMS:
        raise SettingsError(
            f"authMechanism {mechanism}: rsdrill's own member connections log in with "
            f"{', '.join(MECHANISMS)}"
        )
    token = None
    if mechanism == aws_auth.MECHANISM:
        token = _aws_settings(user, parsed.get("password"), opts)
    if mechanism in _EXTERNAL:
        source = "$external" if mechanism != "PLAIN" else opts.get("authsource")
        source = source or parsed.get("database") or "$external"
    else:
        source = opts.get("authsource") or parsed.get("database") or "admin"
    return Credentials(user or "", parsed.get("password") or "", source, mechanism, token)


def _aws_settings(user: str | None, password: str | None, opts: dict[str, Any]) -> str | None:
    """MONGODB-AWS's session token; SettingsError when the login cannot work as written."""
    if not aws_auth.available():
        raise SettingsError(f"authMechanism MONGODB-AWS needs {aws_auth.INSTALL_HINT}")
    if user and not password:
        raise SettingsError(
            "authMechanism MONGODB-AWS: the user is the access key id and the password its "
            "secret access key; give both, or neither to use the AWS credential chain"
        )
    token = (opts.get("authmechanismproperties") or {}).get("AWS_SESSION_TOKEN")
    if token and not user:
        raise SettingsError(
            "authMechanism MONGODB-AWS: AWS_SESSION_TOKEN goes with the access key id and "
            "secret in the URI"
        )
    return str(token) if token else None


# Members that answered `hello` with CommandNotFound: they get `isMaster` from then on.
_legacy_hello: set[str] = set()
_legacy_lock = threading.Lock()


def _remember_legacy(host: str) -> None:
    with _legacy_lock:
        _legacy_hello.add(host)


def handshake_form(host: str) -> str:
    """The command the member answers the handshake to: "hello" or "isMaster"."""
    return "isMaster" if host in _legacy_hello else "hello"


def _client_metadata(app_name: str) -> dict[str, Any]:
    """The handshake's `client` document (the drivers' handshake spec), so a DBA can tell
    rsdrill's connections apart in currentOp and the server log."""
    return {
        "application": {"name": app_name[:128]},
        "driver": {"name": "rsdrill", "version": __version__},
        "os": {"type": platform.system(), "architecture": platform.machine()},
        "platform": f"CPython {platform.python_version()}",
    }


class DirectConnection:
    """One member; the socket is kept between commands and reopened after any failure.

    `options` are always given: a run's connections use its target's (`RunTarget.connect_options`),
    so nothing reaches a member with settings other than the run's."""

    def __init__(self, host: str, timeout_s: float, options: ConnectOptions) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self.options = options
        self._sock: socket.socket | None = None
        # The member's answer to this socket's handshake (hello or isMaster).
        self.handshake: dict[str, Any] = {}
        # The mechanism this socket logged in with (SCRAM's as negotiated), None without one.
        self.logged_in_with: str | None = None

    @property
    def credentials(self) -> Credentials | None:
        return self.options.credentials

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def interrupt(self) -> None:
        """From another thread: the command waiting on this socket fails now, as on a closed
        connection (its own thread then closes the socket)."""
        sock = self._sock
        if sock is None:
            return
        # The plain socket's shutdown (an SSLSocket's own drops its TLS state under the thread
        # reading from it); OSError: closed meanwhile, nothing waits on it.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def command(
        self, db: str | None, cmd: dict[str, Any], *, wait_s: float = 0.0
    ) -> dict[str, Any]:
        """Run one command; the reply body (which may be {ok: 0}); WireClientError otherwise.

        `db` None sends the command without `$db` (only useful to test a server's refusal).
        `wait_s`: how long the server may hold the reply on purpose (an awaitable hello's
        maxAwaitTimeMS), added to the timeout.
        """
        try:
            return self._roundtrip(db, cmd, wait_s)
        except TimeoutError as exc:
            self.close()
            raise WireClientError(f"{self.host}: timed out", timeout=True) from exc
        except ssl.SSLError as exc:
            self.close()
            if _certificate_problem(exc):
                raise TlsError(f"{self.host}: TLS: {_ssl_reason(exc)}") from exc
            raise WireClientError(f"{self.host}: TLS: {_ssl_reason(exc)}") from exc
        except (OSError, EOFError, wire.WireError, bson.errors.BSONError) as exc:
            self.close()
            error = NotListening if isinstance(exc, ConnectionRefusedError) else WireClientError
            raise error(f"{self.host}: {type(exc).__name__}: {exc}") from exc
        except (ScramError, aws_auth.AwsAuthError) as exc:
            self.close()
            user = self.credentials.user if self.credentials else "?"
            raise LoginError(f"{self.host}: login as {user} failed: {exc}") from exc

    def hello(self) -> dict[str, Any]:
        """The member's hello (isMaster where it has no hello), with `isWritablePrimary` set
        whichever form answered."""
        while True:
            # Read on each try: opening the socket may have just learnt the member's form.
            form = handshake_form(self.host)
            reply = self.command("admin", {form: 1})
            if reply.get("code") != COMMAND_NOT_FOUND or form != "hello":
                return _normalized(reply)
            _remember_legacy(self.host)

    def awaited_hello(self, topology: dict[str, Any], max_await_s: float) -> dict[str, Any]:
        """An awaitable hello: the member answers when its `topologyVersion` is no longer
        `topology`, or after `max_await_s`; in the form the socket's handshake used."""
        cmd = {handshake_form(self.host): 1, "topologyVersion": topology,
               "maxAwaitTimeMS": int(max_await_s * 1000)}  # fmt: skip
        return _normalized(self.command("admin", cmd, wait_s=max_await_s))

    def _roundtrip(self, db: str | None, cmd: dict[str, Any], wait_s: float) -> dict[str, Any]:
        # One deadline for the whole command: a socket timeout alone bounds each recv, and a
        # server dripping a byte at a time would never trip it.
        deadline = time.monotonic() + self.timeout_s + wait_s
        if self._sock is None:
            self._open(deadline)
        return self._exchange(db, cmd, deadline)

    def _open(self, deadline: float) -> None:
        name, port = self.host.rsplit(":", 1)
        sock = socket.create_connection((name, int(port)), timeout=_remaining(deadline))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.options.tls is not None:
                sock.settimeout(_remaining(deadline))
                sock = self.options.tls.context().wrap_socket(sock, server_hostname=name)
            self._sock = sock
            try:
                self.handshake = self._handshake(deadline)
            except EOFError:
                if self.options.tls is None:
                    raise
                # With TLS 1.3 a server that rejects (or wants) our certificate may just hang
                # up after the handshake: the first command sees the end of the stream.
                raise TlsError(
                    f"{self.host}: TLS: the member hung up right after the TLS handshake: it "
                    "rejected the client certificate (tlsCertificateKeyFile) or requires one"
                ) from None
            if self.credentials is not None:
                self._log_in(self.credentials, deadline)
        except BaseException:
            self._sock = None
            sock.close()
            raise

    def _handshake(self, deadline: float) -> dict[str, Any]:
        """The connection's first command, carrying the client metadata (a server refuses it
        on any later hello)."""
        cmd: dict[str, Any] = {"client": _client_metadata(self.options.app_name)}
        creds = self.credentials
        if creds is not None and creds.mechanism is None:
            cmd["saslSupportedMechs"] = f"{creds.source}.{creds.user}"
        form = handshake_form(self.host)
        reply = self._exchange("admin", {form: 1, **cmd}, deadline)
        if reply.get("code") == COMMAND_NOT_FOUND and form == "hello":
            _remember_legacy(self.host)
            reply = self._exchange("admin", {"isMaster": 1, "helloOk": True, **cmd}, deadline)
        return _normalized(reply)

    def _log_in(self, credentials: Credentials, deadline: float) -> None:
        """The login on a new socket, within the first command's deadline."""
        mechanism = credentials.mechanism
        if mechanism == "MONGODB-X509":
            cmd: dict[str, Any] = {"authenticate": 1, "mechanism": mechanism}
            if credentials.user:
                cmd["user"] = credentials.user
            _check_login(self._exchange("$external", cmd, deadline))
            self.logged_in_with = mechanism
            return
        if mechanism == "PLAIN":
            payload = f"\x00{credentials.user}\x00{credentials.password}".encode()
            cmd = {"saslStart": 1, "mechanism": "PLAIN", "payload": bson.Binary(payload),
                   "autoAuthorize": 1}  # fmt: skip
            _check_login(self._exchange(credentials.source, cmd, deadline))
            self.logged_in_with = mechanism
            return
        if mechanism == aws_auth.MECHANISM:
            conversation = aws_auth.aws_conversation(credentials)
        else:
            if mechanism is None:
                offered = self.handshake.get("saslSupportedMechs") or []
                mechanism = next((m for m in SCRAM_MECHANISMS if m in offered), "SCRAM-SHA-1")
            client = ScramClient(mechanism, credentials.user, credentials.password)
            conversation = sasl_conversation(client)
        request = next(conversation)
        try:
            while True:
                request = conversation.send(self._exchange(credentials.source, request, deadline))
        except StopIteration:
            self.logged_in_with = mechanism

    def _exchange(self, db: str | None, cmd: dict[str, Any], deadline: float) -> dict[str, Any]:
        assert self._sock is not None
        sock = self._sock
        sock.settimeout(_remaining(deadline))
        request_id = next(_request_ids)
        body = cmd if db is None else {**cmd, "$db": db}
        sock.sendall(wire.encode_op_msg(request_id, 0, body))
        header = _recv_exactly(sock, 16, deadline)
        length, _, response_to, op_code = wire.HEADER.unpack(header)
        if not 16 < length <= wire.MAX_MESSAGE_BYTES:
            raise wire.WireError(f"reply length {length}")
        payload = _recv_exactly(sock, length - 16, deadline)
        if op_code != wire.OP_MSG or response_to != request_id:
            raise wire.WireError(f"unexpected reply (opcode {op_code}, to {response_to})")
        return wire.parse_op_msg(response_to, payload).body


def _normalized(reply: dict[str, Any]) -> dict[str, Any]:
    """isMaster says `ismaster` where hello says `isWritablePrimary`; callers read the latter."""
    if "isWritablePrimary" not in reply and "ismaster" in reply:
        return {**reply, "isWritablePrimary": reply["ismaster"]}
    return reply


def _check_login(reply: dict[str, Any]) -> None:
    if reply.get("ok") != 1:
        raise ScramError(f"{reply.get('errmsg', 'login refused')} (code {reply.get('code')})")


def _certificate_problem(exc: ssl.SSLError) -> bool:
    """A verification failure on our side, or the member's alert that it rejected our
    certificate; a reset or EOF mid-handshake is a member going away, not a refusal."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return True
    reason = (getattr(exc, "reason", None) or "").upper()
    return "ALERT" in reason or "CERTIFICATE" in reason


def _ssl_reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the member's certificate is not trusted: {exc.verify_message}"
    reason = (getattr(exc, "reason", None) or "").upper()
    if "ALERT" in reason:
        return f"the member rejected the handshake ({exc.reason}): check tlsCertificateKeyFile"
    return getattr(exc, "reason", None) or str(exc)


def _remaining(deadline: float) -> float:
    """Seconds left before `deadline` (monotonic); TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks = []
    while n:
        sock.settimeout(_remaining(deadline))
        chunk = sock.recv(n)
        if not chunk:
            raise EOFError("connection closed by the member")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def answers_hello(host: str, timeout_s: float = 0.5, *, options: ConnectOptions) -> bool:
    """Whether the member's process answers a handshake (with TLS when the set requires it)."""
    conn = DirectConnection(host, timeout_s, options)
    try:
        return bool(conn.hello().get("ok"))
    except WireClientError:
        return False
    finally:
        conn.close()


def member_down(host: str, timeout_s: float, *, options: ConnectOptions) -> bool:
    """Whether the member's process is known to be down, nothing listening at its address: a
    fault set by command (a fail point, a clock skew) did not survive that. False when it
    answers, and when it cannot be told: a timeout (frozen, partitioned, loaded) or a login or
    TLS handshake refused leaves the fault in force, for the revert to try and report."""
    conn = DirectConnection(host, timeout_s, options)
    try:
        conn.hello()
    except NotListening:
        return True
    except WireClientError:
        return False
    finally:
        conn.close()
    return False


def first_reply(
    hosts: Sequence[str],
    db: str,
    cmd: dict[str, Any],
    timeout_s: float,
    *,
    options: ConnectOptions,
    ok_only: bool = False,
) -> dict[str, Any] | None:
    """The reply of the first of `hosts` that answers `cmd` (with `ok_only`, the first that
    answers it with ok); None when none does."""
    for host in hosts:
        conn = DirectConnection(host, timeout_s, options)
        try:
            reply = conn.command(db, cmd)
        except WireClientError:
            continue
        finally:
            conn.close()
        if reply.get("ok") or not ok_only:
            return reply
    return None
