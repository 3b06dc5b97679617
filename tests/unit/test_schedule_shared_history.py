"""`rsdrill schedule render --shared-history`: the CronJob's runs record into the fleet's shared
store and honour its lever and leases. The store's URI and the fleet key come from the Secret
(and the job does not start without them); each run waits for its cluster; the regression
check is of this job's clusters and of the runs since it began. The job's script is run by sh
with a stand-in rsdrill to see what each command is handed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import yaml
from test_schedule_metrics_push import EXPERIMENT, container, run_lines
from typer.testing import CliRunner

from rsdrill.cli.app import app


def named(tmp_path: Path, cluster: str | None) -> Path:
    text = EXPERIMENT.read_text()
    if cluster is not None:
        text = text.replace(
            "  platform: kubernetes\n", f"  platform: kubernetes\n  cluster: {cluster}\n"
        )
    path = tmp_path / f"{cluster or 'unnamed'}.yaml"
    path.write_text(text)
    return path


def render(*args: str | Path) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, ["schedule", "render", "--cron", "@daily", *map(str, args)])
    return done.exit_code, done.stdout, done.stderr


def test_the_runs_share_the_store_wait_for_their_cluster_and_check_only_theirs(
    tmp_path: Path,
) -> None:
    first, second = named(tmp_path, "staging eu-1"), named(tmp_path, "staging-us")
    status, out, err = render("--shared-history", "--lease-wait", "600", first, second)
    assert status == 0, err
    job = container(out)
    secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in job["env"]}
    for name in ("RSDRILL_HISTORY", "RSDRILL_FLEET_KEY"):
        assert secret[name] == {"name": "rsdrill-env", "key": name, "optional": False}
    (cron,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "CronJob"]
    deadline = cron["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    assert deadline >= 2 * 2 * 600, "a run waiting for its cluster is not a stuck job"

    before = dt.datetime.now(dt.UTC).replace(microsecond=0, tzinfo=None)
    calls = [c.splitlines() for c in run_lines(job["command"][2], tmp_path / "sh", {})]
    runs, checks = calls[:2], calls[2:]
    for call in runs:
        assert call[0] == "run" and "--history" not in call
        assert call[call.index("--lease-wait") + 1] == "600"
    assert [c[c.index("--cluster") + 1] for c in checks] == ["staging eu-1", "staging-us"]
    for check in checks:
        assert check[0] == "history" and "--fail-on-regression" in check
        since = dt.datetime.fromisoformat(check[check.index("--since") + 1])
        assert before <= since <= dt.datetime.now(dt.UTC).replace(tzinfo=None)


def test_without_shared_history_the_volume_keeps_it_as_before(tmp_path: Path) -> None:
    status, out, err = render(named(tmp_path, "staging-us"))
    assert status == 0, err
    job = container(out)
    assert "env" not in job
    run, check = (c.splitlines() for c in run_lines(job["command"][2], tmp_path / "sh", {}))
    assert run[run.index("--history") + 1] == "/var/lib/rsdrill/history.db"
    assert "--lease-wait" not in run
    assert check[check.index("--db") + 1] == "/var/lib/rsdrill/history.db"


def test_a_file_that_does_not_name_its_cluster_is_refused(tmp_path: Path) -> None:
    status, out, err = render("--shared-history", named(tmp_path, "staging-us"),
                              named(tmp_path, None))  # fmt: skip
    assert status == 2 and out == ""
    assert "unnamed.yaml: target.cluster: a schedule sharing its history names the cluster" in err


def test_a_kubernetes_fleet_gets_its_namespace_key_and_role(tmp_path: Path) -> None:
    status, out, err = render("--fleet", "kubernetes://chaos-fleet", named(tmp_path, None))
    assert status == 0, err
    job = container(out)
    assert job["env"][0] == {"name": "RSDRILL_FLEET", "value": "kubernetes://chaos-fleet"}
    key = next(e for e in job["env"] if e["name"] == "RSDRILL_FLEET_KEY")
    assert key["valueFrom"]["secretKeyRef"]["optional"] is False
    (role, binding) = [d for d in yaml.safe_load_all(out)
                       if d and d["metadata"]["name"] == "rsdrill-nightly-fleet"]  # fmt: skip
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "chaos-fleet"
    assert {r["resources"][0]: r["verbs"] for r in role["rules"]} == {
        "configmaps": ["get", "create", "patch"], "leases": ["get", "create", "update"],
    }  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rsdrill-nightly",
                                    "namespace": "rsdrill"}]  # fmt: skip
    (run, _) = (c.splitlines() for c in run_lines(job["command"][2], tmp_path / "sh", {}))
    assert run[run.index("--lease-wait") + 1] == "1800"
    assert run[run.index("--history") + 1] == "/var/lib/rsdrill/history.db"


def test_a_fleet_elsewhere_than_a_namespace_is_refused(tmp_path: Path) -> None:
    status, out, err = render("--fleet", "mongodb://db/fleet", named(tmp_path, None))
    assert status == 2 and out == "" and "--fleet 'mongodb://db/fleet'" in err
