"""Every writer of rsdrill's output masks a password it is handed in a MongoDB URI: the
reports (result.json, junit.xml, report.html, summary.md, history.jsonl), the journal and the
live view. (The runner redacts before writing; these writers must not rely on it.)"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from report_sample import sample_ops, sample_result

from rsdrill.cli.logs import rendered_to
from rsdrill.engine.actions import carry_out
from rsdrill.engine.journal import Journal
from rsdrill.engine.live import LiveView
from rsdrill.history import History, Op
from rsdrill.platforms.base import TargetError
from rsdrill.redact import redact_uri
from rsdrill.report import write_reports

PASSWORD = "S3cretPassw0rd"
URI = f"mongodb://drill:{PASSWORD}@127.0.0.1:28017,127.0.0.1:28018/?replicaSet=rs0"


def test_reports_mask_the_password(tmp_path: Path) -> None:
    result = sample_result(error=f"internal error: cannot reach {URI}")
    result.target.uri = URI
    result.faults[0].detail["plan"] = f"restart with `mongod --uri {URI}`"
    ops = [*sample_ops(load_ops=50),
           Op("write", "insert", None, 1.0, 1.2, "error", {"error": f"{URI} refused"})]  # fmt: skip
    paths = write_reports(tmp_path, result, ops)
    assert set(paths) == {"result", "junit", "html", "summary", "history"}
    for path in paths.values():
        text = path.read_text()
        assert PASSWORD not in text, path.name
    assert "drill:***@" in paths["result"].read_text()


def test_journal_masks_the_password(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "run.jsonl")
    journal.write("intent", key="k", revert={"action": "local-start", "command": f"x {URI}"})
    journal.write("end", verdict="error", error=URI)
    journal.close()
    text = (tmp_path / "run.jsonl").read_text()
    assert PASSWORD not in text and "drill:***@" in text


def test_recover_refuses_to_rerun_a_masked_start_command(tmp_path: Path) -> None:
    """The journal kept the command without its password: rerunning it could only fail (or
    log in as nobody), so recover says what to run by hand instead, and runs nothing."""
    marker = tmp_path / "ran"
    action = {"action": "local-start", "host": "127.0.0.1:1", "log_dir": str(tmp_path),
              "command": f"sh -c 'touch {marker}' {redact_uri(URI)}"}  # fmt: skip
    with pytest.raises(TargetError, match=r"start command held a password, masked") as refused:
        carry_out(action)
    assert "drill:***@" in str(refused.value) and PASSWORD not in str(refused.value)
    assert not marker.exists()


def test_live_view_masks_the_password() -> None:
    stream = io.StringIO()
    with rendered_to(stream):  # as the command line shows the run's events
        LiveView(History()).event(f"connecting to {URI}")
    assert PASSWORD not in stream.getvalue() and "drill:***@" in stream.getvalue()


def test_secrets_in_uri_options_are_masked_too() -> None:
    uri = ("mongodb+srv://u:pw@rs.example.com/?tls=true&tlsCertificateKeyFilePassword=hunter2"
           "&appName=x&authMechanismProperties=AWS_SESSION_TOKEN:tok3n,SERVICE_NAME:m")  # fmt: skip
    shown = redact_uri(f"error reaching {uri}: refused")
    for secret in ("pw@", "hunter2", "tok3n"):
        assert secret not in shown
    assert "tlsCertificateKeyFilePassword=***&appName=x" in shown
    assert "AWS_SESSION_TOKEN:***,SERVICE_NAME:m" in shown


def test_a_masked_uri_inside_json_keeps_the_json_valid() -> None:
    uri = ("mongodb://AKID:s3cret@h:1/?authMechanism=MONGODB-AWS"
           "&authMechanismProperties=AWS_SESSION_TOKEN:tok%2Fen")  # fmt: skip
    for text in (
        json.dumps({"uri": uri}),
        json.dumps({"uri": uri + "&tlsCertificateKeyFilePassword=pw"}),
    ):
        shown = json.loads(redact_uri(text))["uri"]
        assert "s3cret" not in shown and "tok" not in shown and "=pw" not in shown, shown


@pytest.mark.parametrize(
    ("uri", "planned"),
    [
        # '@' and '/' unescaped: the driver refuses the URI, and its error must not show the
        # password; with '/', its hosts read as 'drill:Pa', which loading refuses already.
        ("mongodb://drill:Pa@ss@127.0.0.1:1/", True),
        ("mongodb://drill:Pa/ss@127.0.0.1:1/", False),
        ("mongodb://:Pass@127.0.0.1:1/", True),  # no user name
    ],
)
def test_a_password_the_driver_cannot_parse_is_masked_too(
    tmp_path: Path, uri: str, planned: bool
) -> None:
    from typer.testing import CliRunner

    from rsdrill.cli.app import app

    experiment = tmp_path / "e.yaml"
    experiment.write_text(
        f"name: t\ntarget:\n  platform: local\n  uri: '{uri}'\n  members:\n"
        "    - {host: '127.0.0.1:1', start: 'true', dbpath: /nowhere}\n"
        "faults:\n  - {at: 1s, kind: stepdown, select: primary}\n"
    )
    shown = CliRunner().invoke(app, ["plan", str(experiment)])
    if planned:
        assert shown.exit_code == 0 and "uri mongodb://" in shown.output, shown.output
    else:
        assert shown.exit_code == 2 and "target.uri: its hosts" in shown.output, shown.output
    assert "ss@" not in shown.output, shown.output
    # The shared history, as `rsdrill history` is pointed at one (the driver's error shown).
    history = CliRunner().invoke(app, ["history"], env={"RSDRILL_HISTORY": uri})
    assert "127.0.0.1:1" in history.output and "ss@" not in history.output, history.output
