"""`abort_on:` from the team's own monitoring, against servers nobody here wrote: Debian's
Prometheus scraping a page the test writes, and CloudWatch alarms on moto's server. A query
that starts returning a series stops the run after its `for` (the fault reverted, exit 3); an
alarm set to ALARM likewise; a source that cannot be reached stops the run, or is recorded as
ignored when told to; `rsdrill check` refuses (exit 2, nothing built) a malformed query, an
alarm that does not exist, an unreachable source and one that already says stop."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rsdrill.engine.check import check_experiment
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.sandbox.hosts import free_port_base as free_port
from rsdrill.result import Result
from tests.harness.acting_run import run_acting
from tests.harness.cli import rsdrill_run
from tests.harness.moto_ec2 import client, moto_server
from tests.harness.prometheus import Prometheus, prometheus

pytestmark = pytest.mark.slow
QUIET = "drill_errors 0\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with prometheus(tmp_path_factory.mktemp("prometheus"), QUIET) as server:
        yield server


@pytest.fixture
def cloudwatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIARSDRILLTESTKEY01")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "rsdrill-test-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto_server(tmp_path / "moto.log") as endpoint:
        watch = client(endpoint, "cloudwatch")
        watch.put_metric_alarm(AlarmName="payments-5xx", MetricName="5xx", Namespace="app",
                               Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=1,
                               ComparisonOperator="GreaterThanThreshold")  # fmt: skip
        yield endpoint, watch


def _experiment(base: int, abort_on: list[Any]) -> Experiment:
    return Experiment.model_validate({
        "name": "monitored",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "2s",
                   "heartbeat_interval": "500ms", "port_base": base},
        "probes": {"availability": {"interval": "20ms"}},
        "faults": [{"at": "1s", "kind": "host-freeze", "select": "secondary", "duration": "60s"}],
        "observe": {"after_revert": "1s"},
        "abort_on": abort_on,
    })  # fmt: skip


def _run_until(exp: Experiment, out: Path, act: Callable[[], object]) -> tuple[Result, float]:
    """Run `exp`; `act` once its fault is in force (it goes in at 1 s); the result and the
    seconds from `act`'s return to the revert phase."""
    result, took = run_acting(exp, out, 1.5, lambda: (act(), None)[1], timeout_s=120)
    assert result is not None, "the run did not end"
    return result, took


def test_a_query_that_starts_returning_a_series_stops_the_run_after_its_for(
    prom: Prometheus, tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    exp = _experiment(free_port_base(3), [
        {"prometheus": {"url": prom.url, "query": "drill_errors > 0", "for": "2s"}}])  # fmt: skip
    try:
        result, took = _run_until(exp, tmp_path / "out", lambda: prom.set("drill_errors 3\n"))
    finally:
        prom.set(QUIET)
    assert result.verdict == "aborted" and result.exit_code == 3, result.error
    assert "drill_errors > 0" in (result.error or "") and "for 2 s" in (result.error or "")
    assert result.faults and result.faults[0].reverted_at_s is not None
    # Not before its `for`; within it plus a scrape, a poll and the query (the issue: + 2 s).
    assert 2.0 - 0.1 <= took <= 2.0 + 1.0 + 1.0 + 2.0, took


def test_an_unreachable_source_stops_the_run_or_is_recorded_when_told_to_ignore(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    dead = f"http://127.0.0.1:{free_port(1)}"
    source = {"url": dead, "query": "up == 0", "timeout": "500ms"}
    stopped, _ = _run_until(_experiment(free_port_base(3), [{"prometheus": source}]),
                            tmp_path / "abort", lambda: None)  # fmt: skip
    assert stopped.verdict == "aborted", stopped.error
    assert "on_unreachable: abort" in (stopped.error or "")
    ignoring = {"prometheus": {**source, "on_unreachable": "ignore"}}
    exp = _experiment(free_port_base(3), [ignoring])
    exp = exp.model_copy(update={"faults": (exp.faults[0].model_copy(update={"duration": 1.0}),)})
    went_on = run_experiment(exp, RunOptions(out_dir=tmp_path / "ignore", live=False,
                                             journal_dir=tmp_path / "journal"))  # fmt: skip
    assert went_on.verdict == "pass", went_on.error
    assert len(went_on.ignored_monitors) == 1 and dead in went_on.ignored_monitors[0]


def test_an_alarm_set_to_alarm_stops_the_run(
    cloudwatch: tuple[str, Any], tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    endpoint, watch = cloudwatch
    exp = _experiment(free_port_base(3), [
        {"cloudwatch": {"alarm": "payments-5xx", "endpoint_url": endpoint}}])  # fmt: skip
    result, took = _run_until(exp, tmp_path / "out", lambda: watch.set_alarm_state(
        AlarmName="payments-5xx", StateValue="ALARM", StateReason="5xx burst"))  # fmt: skip
    assert result.verdict == "aborted" and "payments-5xx" in (result.error or ""), result.error
    assert result.faults[0].reverted_at_s is not None
    assert took <= 1.0 + 2.0 + 2.0, took


def test_check_refuses_what_cannot_be_asked_before_anything_is_built(
    prom: Prometheus, cloudwatch: tuple[str, Any], tmp_path: Path
) -> None:
    endpoint, _ = cloudwatch
    dead = f"http://127.0.0.1:{free_port(1)}"

    def line(item: dict[str, Any]) -> tuple[bool | None, str]:
        [check] = [c for c in check_experiment(_experiment(27017, [item]))
                   if c.name == "abort_on[0]"]  # fmt: skip
        return check.ok, check.detail

    assert line({"prometheus": {"url": prom.url, "query": "drill_errors > 0"}})[0] is True
    malformed = line({"prometheus": {"url": prom.url, "query": "drill_errors >"}})
    assert malformed[0] is False and "bad_data" in malformed[1], malformed
    assert line({"prometheus": {"url": dead, "query": "up"}})[0] is False
    assert line({"prometheus": {"url": dead, "query": "up", "on_unreachable": "ignore"}})[0] is None
    firing = line({"prometheus": {"url": prom.url, "query": "drill_errors >= 0"}})
    assert firing[0] is False and "says stop already" in firing[1], firing
    missing = line({"cloudwatch": {"alarm": "no-such-alarm", "endpoint_url": endpoint}})
    assert missing[0] is False and "no such alarm" in missing[1], missing
    assert line({"cloudwatch": {"alarm": "payments-5xx", "endpoint_url": endpoint}})[0] is True
    # The CLI: one line naming the field, exit 2, nothing built.
    path = tmp_path / "bad.yaml"
    path.write_text(f"""name: bad-query
target: {{platform: sandbox, topology: rs1}}
faults: [{{at: 1s, kind: stepdown, select: primary}}]
abort_on: [{{prometheus: {{url: "{prom.url}", query: "drill_errors >"}}}}]
""")
    out = tmp_path / "out"
    done = rsdrill_run(["run", str(path), "--out",
                           str(out), "--no-live", "--no-history"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "abort_on[0]" in done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
