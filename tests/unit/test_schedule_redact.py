"""Fault scheduling and secret redaction."""

from __future__ import annotations

from rsdrill.engine.schedule import build_schedule
from rsdrill.experiment.schema import make_fault
from rsdrill.redact import redact_mapping, redact_uri


def test_schedule_orders_overlapping_faults_and_reverts_first_at_ties() -> None:
    faults = [
        make_fault(at=5, kind="host-kill", duration=20),
        make_fault(at=25, kind="host-freeze", select="secondary", duration=5),
        make_fault(at=10, kind="stepdown"),
        make_fault(at=1, kind="host-kill", restart={"after": 2, "volume": "wipe"}),
        make_fault(at=2, kind="host-kill", restart=False),
    ]
    got = [(a.at_s, a.what, a.index) for a in build_schedule(faults)]
    assert got == [
        (1, "inject", 3),
        (2, "inject", 4),
        (3, "revert", 3),
        (5, "inject", 0),
        (10, "inject", 2),
        (25, "revert", 0),
        (25, "inject", 1),
        (30, "revert", 1),
    ]


def test_uri_passwords_are_masked() -> None:
    uri = "mongodb://admin:s3cr%40t@db1:27017,db2/?replicaSet=rs0"
    assert redact_uri(uri) == "mongodb://admin:***@db1:27017,db2/?replicaSet=rs0"
    assert redact_uri("mongodb+srv://u:p@x.example/") == "mongodb+srv://u:***@x.example/"
    assert redact_uri("mongodb://db1:27017/") == "mongodb://db1:27017/"
    text = "failed: mongodb://a:b@h1/ and mongodb://c:d@h2/"
    assert redact_uri(text) == "failed: mongodb://a:***@h1/ and mongodb://c:***@h2/"


def test_secret_keys_are_masked_in_nested_values() -> None:
    value = {
        "uri": "mongodb://u:pw@h/",
        "aws": {"secret_access_key": "AKIA...", "region": "x"},
        "list": [{"token": "t"}],
    }
    assert redact_mapping(value) == {
        "uri": "mongodb://u:***@h/",
        "aws": {"secret_access_key": "***", "region": "x"},
        "list": [{"token": "***"}],
    }
