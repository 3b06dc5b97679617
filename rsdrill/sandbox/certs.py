"""Throw-away TLS certificates for a sandbox that requires TLS, as staging sets do.

`make_tls_files` writes, under `<sandbox>/tls/`: `ca.pem` (the CA every member and client
trusts), `server.pem` (the members' certificate and key in one file, as mongod's
tlsCertificateKeyFile: valid for serving and for the members' own connections to each other)
and `client.pem` (the user's certificate and key: its subject is the MONGODB-X509 user). Keys
are private to the owner. Real certificates from a real TLS stack (`cryptography`, OpenSSL),
so pymongo and rsdrill verify them as they verify any deployment's.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TLS_DIR = "tls"
VALID_DAYS = 30
ORGANIZATION = "rsdrill-sandbox"
# The MONGODB-X509 user the client certificate makes (RFC 2253, as mongod names it).
CLIENT_SUBJECT = f"CN=rsdrill,OU=clients,O={ORGANIZATION}"
# The subject members present to each other: mongod's x.509 member authentication knows a
# member by the O/OU of its certificate.
MEMBER_SUBJECT = f"CN=member,OU=members,O={ORGANIZATION}"


@dataclass(frozen=True)
class TlsFiles:
    """Where a sandbox's certificates are."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server(self) -> Path:
        return self.directory / "server.pem"

    @property
    def client(self) -> Path:
        return self.directory / "client.pem"


def tls_files(sandbox_dir: Path) -> TlsFiles:
    return TlsFiles(sandbox_dir / TLS_DIR)


@dataclass(frozen=True)
class Authority:
    """A CA: its certificate and key, kept in memory to issue certificates with."""

    certificate: Any  # cryptography's x509.Certificate, imported only when certificates are made
    key: Any

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return bytes(self.certificate.public_bytes(serialization.Encoding.PEM))


def new_authority(name: str = f"{ORGANIZATION} CA") -> Authority:
    """A fresh self-signed CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])  # fmt: skip
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(certificate, key)


def issue(
    authority: Authority, subject: str, *, hosts: Sequence[str] = (), server: bool = False
) -> bytes:
    """A certificate for `subject` (RFC 2253, e.g. "CN=x,OU=y,O=z") signed by `authority`,
    with its private key, as one PEM. `hosts` go in the subjectAltName; `server` also allows
    serving TLS (a member's certificate does both)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name.from_rfc4514_string(subject))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in dict.fromkeys(hosts):
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(authority.key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM) + key_pem


def make_tls_files(sandbox_dir: Path, member_hosts: list[str]) -> TlsFiles:
    """A new CA, the members' certificate and the client's, under `sandbox_dir/tls`."""
    files = tls_files(sandbox_dir)
    files.directory.mkdir(parents=True, exist_ok=True)
    os.chmod(files.directory, 0o700)
    authority = new_authority()
    addresses = ["127.0.0.1", "localhost", *(h.rsplit(":", 1)[0] for h in member_hosts)]
    files.ca.write_bytes(authority.pem())
    _write_private(files.server, issue(authority, MEMBER_SUBJECT, hosts=addresses, server=True))
    _write_private(files.client, issue(authority, CLIENT_SUBJECT))
    return files


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def rfc2253_subject(peercert: dict[str, object] | None) -> str | None:
    """The subject of a peer certificate from `ssl.SSLSocket.getpeercert()`, as mongod names
    an x.509 user: RFC 2253, most specific attribute first ("CN=...,OU=...,O=...")."""
    if not peercert or not peercert.get("subject"):
        return None
    short = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
             "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
             "domainComponent": "DC", "streetAddress": "STREET", "userId": "UID"}  # fmt: skip
    parts = []
    subject: Any = peercert["subject"]
    for rdn in reversed(subject):
        for name, value in rdn:
            escaped = str(value).replace("\\", "\\\\").replace(",", "\\,").replace("+", "\\+")
            parts.append(f"{short.get(name, name)}={escaped}")
    return ",".join(parts)
