"""What rsdrill's own member connections take from a connection string, and the errors a user
gets for one that cannot work (nothing is sent to any server in these tests)."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest

from rsdrill.connection import (
    GIVEN_OPTIONS,
    ConnectOptions,
    SecretNeeded,
    SettingsError,
    action_options,
    parse_uri,
)
from rsdrill.sandbox.certs import new_authority
from rsdrill.scram import ScramError, mongo_password


def test_seeds_replica_set_and_app_name() -> None:
    parsed = parse_uri("mongodb://a.example:27018,b.example/?replicaSet=rs0&appName=nightly")
    assert parsed.seeds == ["a.example:27018", "b.example:27017"]
    assert parsed.replica_set == "rs0"
    assert parsed.options.app_name == "nightly"
    assert parsed.options.tls is None and parsed.options.credentials is None


def test_the_handshake_names_rsdrill_unless_the_uri_names_the_app() -> None:
    assert ConnectOptions.from_uri("mongodb://h/").app_name == "rsdrill"


def test_tls_options_as_pymongo_reads_them(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(new_authority().pem())
    options = ConnectOptions.from_uri(
        f"mongodb://h/?tlsCAFile={ca}&tlsAllowInvalidHostnames=true"  # a CA file implies tls
    )
    assert options.tls is not None
    assert options.tls.ca_file == str(ca)
    assert options.tls.allow_invalid_hostnames and not options.tls.allow_invalid_certificates
    assert options.tls.context().check_hostname is False
    insecure = ConnectOptions.from_uri("mongodb://h/?tls=true&tlsInsecure=true")
    assert insecure.tls is not None
    assert insecure.tls.context().verify_mode == ssl.CERT_NONE
    assert ConnectOptions.from_uri("mongodb://h/?tls=true").tls.context().check_hostname  # type: ignore[union-attr]


def test_an_unreadable_ca_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "ca.pem"
    with pytest.raises(SettingsError) as err:
        ConnectOptions.from_uri(f"mongodb://h/?tls=true&tlsCAFile={missing}")
    assert str(missing) in str(err.value)


def test_a_ca_file_that_is_not_a_certificate_is_named(tmp_path: Path) -> None:
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(SettingsError) as err:
        ConnectOptions.from_uri(f"mongodb://h/?tls=true&tlsCAFile={junk}")
    assert f"tlsCAFile {junk}" in str(err.value)


def test_a_client_key_file_that_does_not_load_is_named(tmp_path: Path) -> None:
    key = tmp_path / "client.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(SettingsError) as err:
        ConnectOptions.from_uri(
            f"mongodb://h/?tls=true&tlsInsecure=true&tlsCertificateKeyFile={key}"
        )
    assert f"tlsCertificateKeyFile {key}" in str(err.value)


def test_x509_and_plain_log_in_on_external() -> None:
    x509 = ConnectOptions.from_uri(
        "mongodb://h/?authMechanism=MONGODB-X509&tls=true&tlsInsecure=true"
    )
    assert x509.credentials is not None
    assert (x509.credentials.user, x509.credentials.source) == ("", "$external")
    assert x509.credentials.mechanism == "MONGODB-X509"
    plain = ConnectOptions.from_uri("mongodb://ldapuser:pw@h/?authMechanism=PLAIN")
    assert plain.credentials is not None
    assert (plain.credentials.user, plain.credentials.source) == ("ldapuser", "$external")
    scram = ConnectOptions.from_uri("mongodb://u:pw@h/app?authSource=admin")
    assert scram.credentials is not None
    assert (scram.credentials.source, scram.credentials.mechanism) == ("admin", None)
    assert scram.describe() == {"tls": False, "tls_client_certificate": False,
                                "auth_mechanism": "SCRAM (negotiated)"}  # fmt: skip


def test_mongodb_aws_takes_the_key_secret_and_session_token_from_the_uri() -> None:
    options = ConnectOptions.from_uri(
        "mongodb://AKIDEXAMPLE:s%2Fecret@h/?authMechanism=MONGODB-AWS"
        "&authMechanismProperties=AWS_SESSION_TOKEN:t%2Bk"
    )
    creds = options.credentials
    assert creds is not None
    assert (creds.user, creds.password, creds.token) == ("AKIDEXAMPLE", "s/ecret", "t+k")
    assert (creds.source, creds.mechanism) == ("$external", "MONGODB-AWS")
    assert "ecret" not in repr(creds) and "t+k" not in repr(creds)
    chain = ConnectOptions.from_uri("mongodb://h/?authMechanism=MONGODB-AWS").credentials
    assert chain is not None and (chain.user, chain.token) == ("", None)


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("mongodb://AKID@h/?authMechanism=MONGODB-AWS", "give both, or neither"),
        ("mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:tk",
         "AWS_SESSION_TOKEN goes with the access key id"),
    ],
)  # fmt: skip
def test_a_mongodb_aws_login_that_cannot_work_is_refused_before_sending(
    uri: str, says: str
) -> None:
    with pytest.raises(SettingsError, match=says) as err:
        ConnectOptions.from_uri(uri)
    assert ":tk" not in str(err.value)


def test_a_mechanism_rsdrill_cannot_speak_is_refused_by_name() -> None:
    with pytest.raises(SettingsError) as err:
        ConnectOptions.from_uri("mongodb://u:secret@h/?authMechanism=GSSAPI")
    assert "authMechanism GSSAPI" in str(err.value)
    assert "secret" not in str(err.value)


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("replicaSet=rs0&bogusOpt=1", "unknown URI option 'bogusOpt'"),
        ("replicaSt=rs0&appName=x",
         "unknown URI option 'replicaSt' (did you mean 'replicaset'?)"),
    ],
)  # fmt: skip
def test_an_unknown_option_is_named(query: str, says: str) -> None:
    """pymongo's own message names no option ("Unknown option. Did you mean one of (authsource,
    ...) or maybe a camelCase version of one? Refer to docstring.")."""
    with pytest.raises(SettingsError) as err:
        parse_uri(f"mongodb://u:s3cret@h/?{query}")
    assert str(err.value) == says
    assert "s3cret" not in str(err.value)


def test_an_invalid_uri_never_shows_its_password() -> None:
    with pytest.raises(SettingsError) as err:
        parse_uri("mongodb://u:s3cret@h/?replicaSet=rs0&w=bogus&tls=maybe")
    assert "s3cret" not in str(err.value)


@pytest.mark.parametrize(
    ("given", "prepared"),
    [
        ("I\u00adX", "IX"),  # RFC 4013 examples: soft hyphen mapped to nothing
        ("user", "user"),
        ("\u00aa", "a"),  # NFKC
        ("\u2168", "IX"),
    ],
)
def test_scram_sha_256_passwords_go_through_saslprep(given: str, prepared: str) -> None:
    assert mongo_password("SCRAM-SHA-256", "u", given) == prepared


def test_a_password_saslprep_prohibits_is_a_login_error() -> None:
    with pytest.raises(ScramError):
        mongo_password("SCRAM-SHA-256", "u", "bell\u0007")


def test_scram_sha_1_keeps_mongodbs_digest_of_the_raw_password() -> None:
    # SCRAM-SHA-1 in MongoDB hashes user:mongo:password with MD5 and no SASLprep.
    assert mongo_password("SCRAM-SHA-1", "u", "I\u00adX") != mongo_password(
        "SCRAM-SHA-1", "u", "IX"
    )


def test_journaled_settings_keep_tls_and_the_user_never_a_secret(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(new_authority().pem())
    scram = ConnectOptions.from_uri(f"mongodb://ops:s3cret-pw@h/?tls=true&tlsCAFile={ca}")
    saved = json.loads(json.dumps(scram.journaled()))
    assert "s3cret-pw" not in json.dumps(saved)
    # The TLS handshake can be made again from it; the login cannot, and says what it needs.
    plain_tls = ConnectOptions.from_journal(saved, login=False)
    assert plain_tls.tls is not None and plain_tls.tls.ca_file == str(ca)
    assert plain_tls.credentials is None
    with pytest.raises(SecretNeeded, match=r"the password of ops.*rsdrill recover --uri"):
        ConnectOptions.from_journal(saved, login=True)
    # Given again (`rsdrill recover --uri`), those settings win.
    action = {"connect": saved, GIVEN_OPTIONS: scram}
    assert action_options(action, login=True) is scram
    # x.509 holds no secret: the login is made from the journal alone.
    x509 = ConnectOptions.from_uri(
        f"mongodb://h/?tls=true&tlsCAFile={ca}&authMechanism=MONGODB-X509"
    )
    again = ConnectOptions.from_journal(json.loads(json.dumps(x509.journaled())), login=True)
    assert again.credentials is not None and again.credentials.mechanism == "MONGODB-X509"
    assert again.tls == x509.tls
    # Journals written before the settings were: plain, as then.
    assert ConnectOptions.from_journal(None, login=True) == ConnectOptions()
