"""Secrets never leave rsdrill: passwords in URIs and credential-looking values are masked."""

from __future__ import annotations

import re

MASK = "***"
# Any scheme: MongoDB URIs, and the HTTP endpoints rsdrill reports to (a Pushgateway's basic
# auth, a webhook's). The password runs to the URI's last '@': one typed with an unescaped
# '@' or '/' (a URI the driver refuses, whose error shows it) is still a password, and so is
# one after an empty user name. A URI ends at a space, a quote or a bracket.
_URI_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s\"'<>]*:)([^\s\"'<>]+)(@)")
_MASKED_URI_PASSWORD = re.compile(rf"mongodb(?:\+srv)?://[^:/@\s]*:{re.escape(MASK)}@")
# Options whose value is a secret: the client key's passphrase, and AWS credentials that
# MONGODB-AWS takes in authMechanismProperties (AWS_SESSION_TOKEN:...).
# A value ends where the URI does: at the next option, or a quote or bracket around the URI
# (a URI inside JSON text must keep its closing quote).
_URI_SECRET_OPTION = re.compile(
    r"(?i)((?:[?&]|%26)(?:tlsCertificateKeyFilePassword|sslPEMKeyPassword)=)([^&\s\"'<>]+)"
    r"|(AWS_SESSION_TOKEN(?::|%3A))([^,&\s\"'<>]+)"
)
# What text must hold, lowercased, for an alternative of _URI_SECRET_OPTION to match.
_SECRET_OPTION_STARTS = ("password=", "aws_session_token")
_SECRET_KEY = re.compile(r"(?i)(password|passwd|secret|token|access_key|private_key)")


def redact_uri(text: str) -> str:
    """Mask the password of every URI in `text` (user names stay: they help debugging), and
    the secrets a MongoDB URI's options may carry."""
    if "://" not in text:
        lowered = text.lower()
        if not any(start in lowered for start in _SECRET_OPTION_STARTS):
            return text  # most text (a history's millions of lines): no pattern can match
    text = _URI_PASSWORD.sub(rf"\1{MASK}\3", text)
    return _URI_SECRET_OPTION.sub(
        lambda m: f"{m.group(1)}{MASK}" if m.group(1) else f"{m.group(3)}{MASK}", text
    )


def has_masked_password(text: str) -> bool:
    """Whether `text` holds a MongoDB URI whose password `redact_uri` masked."""
    return _MASKED_URI_PASSWORD.search(text) is not None


def redact_mapping(value: object) -> object:
    """A copy of nested dicts/lists with secret-named keys masked and URIs redacted."""
    if isinstance(value, dict):
        return {
            k: MASK if isinstance(k, str) and _SECRET_KEY.search(k) else redact_mapping(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_mapping(v) for v in value]
    if isinstance(value, str):
        return redact_uri(value)
    return value
