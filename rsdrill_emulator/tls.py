"""The members' TLS: the context they serve with and the one they call each other with."""

from __future__ import annotations

import ssl
from pathlib import Path

from rsdrill.sandbox.certs import tls_files


def member_server_context(sandbox_dir: Path, *, require_client_certificate: bool) -> ssl.SSLContext:
    """TLS only, with the sandbox's member certificate. Client certificates are verified against
    the sandbox's CA when sent, and required when clients log in with them (x.509), as mongod
    without and with allowConnectionsWithoutCertificates."""
    files = tls_files(sandbox_dir)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(files.ca))
    context.load_cert_chain(str(files.server))
    context.verify_mode = ssl.CERT_REQUIRED if require_client_certificate else ssl.CERT_OPTIONAL
    return context


def member_client_context(sandbox_dir: Path) -> ssl.SSLContext:
    """For a member's calls to another: verifies the peer, presents the member certificate."""
    files = tls_files(sandbox_dir)
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(files.ca))
    context.load_cert_chain(str(files.server))
    return context
