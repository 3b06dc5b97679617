"""SCRAM against RFC 7677's published exchange, and the two halves against each other."""

from __future__ import annotations

import base64

import pytest

from rsdrill.scram import ScramClient, ScramError, ScramServer, derive_keys


def test_client_matches_rfc_7677_example() -> None:
    # RFC 7677 section 3: user "user", password "pencil" (SCRAM-SHA-256 over the raw password).
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client.final(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ScramError, match="does not know the password"):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
def test_client_and_server_agree_only_on_the_right_password(mechanism: str) -> None:
    keys = {"rsdrill": derive_keys(mechanism, "rsdrill", "s3cret", b"0123456789abcdef", 4096)}
    client = ScramClient(mechanism, "rsdrill", "s3cret")
    server = ScramServer(mechanism, keys)
    client.verify(server.final(client.final(server.first(client.first()))))
    wrong = ScramClient(mechanism, "rsdrill", "guess")
    server = ScramServer(mechanism, keys)
    with pytest.raises(ScramError, match="authentication failed"):
        server.final(wrong.final(server.first(wrong.first())))
    with pytest.raises(ScramError, match="authentication failed"):
        ScramServer(mechanism, keys).first(ScramClient(mechanism, "nobody", "x").first())
