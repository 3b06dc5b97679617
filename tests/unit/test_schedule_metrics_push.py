"""`rsdrill schedule render --metrics-push` (or RSDRILL_METRICS_PUSH): the CronJob's runs push
their metrics to a Pushgateway, named in the job or taken from the Secret; the job's script is
run by sh with a stand-in rsdrill to see what each run is handed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rsdrill.cli.app import app

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = REPO / "experiments" / "k8s-rs3-pod-kill.yaml"
GATEWAY = "http://pushgateway.monitoring:9091"


def render(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(
        app, ["schedule", "render", "--cron", "@daily", *args, str(EXPERIMENT)], env=env
    )
    return done.exit_code, done.stdout, done.stderr


def container(text: str) -> dict[str, Any]:
    (cronjob,) = [doc for doc in yaml.safe_load_all(text) if doc and doc["kind"] == "CronJob"]
    (only,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert isinstance(only, dict)
    return only


def run_lines(script: str, tmp_path: Path, env: dict[str, str]) -> list[str]:
    """The job's script run by sh, each `rsdrill ...` it would run recorded instead, one
    argument per line; after the `recover --force` every job begins with."""
    tmp_path.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    stand_in = f'rsdrill() {{ printf "%s\\n" "$@" "--" >> {calls}; }}\n'
    done = subprocess.run(["/bin/sh", "-c", stand_in + script], env={"PATH": os.environ["PATH"],
                          **env}, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    recover, *rest = calls.read_text().split("--\n")[:-1]
    assert recover == "recover\n--force\n"
    return rest


@pytest.mark.parametrize("given", ["flag", "env"])
def test_every_run_pushes_to_the_gateway_named(tmp_path: Path, given: str) -> None:
    if given == "flag":
        status, out, err = render("--metrics-push", GATEWAY)
    else:
        status, out, err = render(env={"RSDRILL_METRICS_PUSH": GATEWAY})
    assert status == 0, err
    job = container(out)
    assert "env" not in job, "nothing taken from the Secret"
    run, history = run_lines(job["command"][2], tmp_path, {})
    assert run.startswith("run\n") and run.splitlines()[-2:] == ["--metrics-push", GATEWAY]
    assert history.startswith("history\n") and "--metrics-push" not in history


def test_without_a_gateway_nothing_is_pushed() -> None:
    status, out, err = render(env={"RSDRILL_METRICS_PUSH": ""})
    assert status == 0, err
    assert "--metrics-push" not in out and "env" not in container(out)


def test_a_gateway_from_the_secret_is_pushed_to_only_when_the_secret_has_it(
    tmp_path: Path,
) -> None:
    status, out, err = render("--metrics-push", "${PUSHGATEWAY_URL}", "--env-secret", "chaos")
    assert status == 0, err
    job = container(out)
    assert job["env"] == [
        {
            "name": "PUSHGATEWAY_URL",
            "valueFrom": {
                "secretKeyRef": {"name": "chaos", "key": "PUSHGATEWAY_URL", "optional": True}
            },
        }
    ]
    secret_url = "https://ci:s3cret@gateway.example:9091"
    with_url = run_lines(job["command"][2], tmp_path / "set", {"PUSHGATEWAY_URL": secret_url})
    assert with_url[0].splitlines()[-2:] == ["--metrics-push", secret_url]
    without = run_lines(job["command"][2], tmp_path / "unset", {})
    assert without[0].startswith("run\n") and "--metrics-push" not in without[0]
    assert secret_url not in out


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://ci:s3cret@gateway:9091", "carries credentials"),
        ("pushgateway:9091", "want a Pushgateway URL"),
    ],
)
def test_a_url_in_the_clear_with_a_password_or_no_scheme_is_refused(url: str, message: str) -> None:
    status, out, err = render("--metrics-push", url)
    assert status == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
    assert "s3cret" not in err


def test_the_nightly_manifests_push_when_the_secret_names_a_gateway() -> None:
    for topology in ("rs1", "rs3"):
        job = container((REPO / "manifests" / "nightly" / topology / "nightly.yaml").read_text())
        secret = {"name": "rsdrill-env", "key": "RSDRILL_METRICS_PUSH", "optional": True}
        assert {"name": "RSDRILL_METRICS_PUSH", "valueFrom": {"secretKeyRef": secret}} in job["env"]
        assert (
            '${RSDRILL_METRICS_PUSH:+--metrics-push "$RSDRILL_METRICS_PUSH"}' in (job["command"][2])
        )
