"""The pytest plugin as a user's suite meets it: pytest sessions of their own (pytester), the
plugin loaded through its `pytest11` entry point, experiments run on the sandbox."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# Tiny and fast: 1 s elections, the primary's host killed at 2 s for 2 s.
EXPERIMENT = """\
name: plugin-tiny
target: {platform: sandbox, topology: rs3, election_timeout: 1s}
faults:
  - {at: 2s, kind: host-kill, select: primary, duration: 2s}
observe: {after_revert: 10s}
slo:
  write_unavailable_s: "<= 10"
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A user's project with the experiment in `tiny.yaml`; fault journals in its own home."""
    monkeypatch.setenv("RSDRILL_HOME", str(pytester.path / "rsdrill-home"))
    pytester.makefile(".yaml", tiny=EXPERIMENT)
    return pytester


def junit_properties(path: Path) -> dict[str, dict[str, str]]:
    """Test name → its JUnit properties."""
    return {
        case.get("name", ""): {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        for case in ET.parse(path).getroot().iter("testcase")
    }


def test_fixture_passing_and_failing_slo_with_junit_properties(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_drill="""
        def test_slo_holds(rsdrill):
            run = rsdrill.run("tiny.yaml")
            assert run.verdict == "pass"
            assert 0 < run.write_unavailable_s <= 10
            assert run.failover_parts.election_s is not None
            assert run.latency_ms.p99 > 0
            assert run.result.metrics.write_unavailable_s == run.write_unavailable_s
            assert (run.out_dir / "result.json").is_file() and run.report_path.is_file()
            run.assert_slo()

        def test_slo_fails(rsdrill):
            run = rsdrill.run("tiny.yaml", slo__write_unavailable_s="<= 0.01", probes__lag=None)
            assert run.replication_lag_max_s is None
            run.assert_slo()
        """
    )
    xml = suite.path / "junit.xml"
    outcome = suite.runpytest_subprocess(f"--junitxml={xml}")
    outcome.assert_outcomes(passed=1, failed=1)
    outcome.stdout.fnmatch_lines(
        [
            ">       run.assert_slo()",
            "E       AssertionError: rsdrill experiment 'plugin-tiny': 1 of 1 SLOs failed",
            "E         write_unavailable_s: observed *, threshold <= 0.01",
            "E       report: */test_slo_fails/report.html",
        ]
    )
    properties = junit_properties(xml)
    holds, fails = properties["test_slo_holds"], properties["test_slo_fails"]
    assert holds["rsdrill.verdict"] == "pass" and fails["rsdrill.verdict"] == "fail"
    assert 0 < float(holds["rsdrill.write_unavailable_s"]) <= 10
    assert float(fails["rsdrill.write_unavailable_s"]) > 0.01
    assert float(holds["rsdrill.recovery_s.max"]) >= 0
    assert float(holds["rsdrill.latency_ms.p99"]) > 0
    assert fails["rsdrill.replication_lag_max_s"] == "null"  # its probe was turned off
    assert Path(holds["rsdrill.report"]).is_file()
    assert Path(holds["rsdrill.report"]).parent.name == "test_slo_holds"


def test_marker_turns_an_experiment_into_a_test(suite: pytest.Pytester) -> None:
    # A run that ends in error: the sandbox's first port is taken (held here for the run).
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        suite.makepyfile(
            test_marked=f"""
            import pytest

            @pytest.mark.rsdrill("tiny.yaml")
            def test_holds(rsdrill):
                assert rsdrill.runs[0].verdict == "pass"

            @pytest.mark.rsdrill("tiny.yaml", slo__write_unavailable_s="<= 0.01")
            def test_violated():
                pass

            @pytest.mark.rsdrill("tiny.yaml", target__port_base={port})
            def test_errs():
                pass
            """
        )
        outcome = suite.runpytest_subprocess("-rf")
    outcome.assert_outcomes(passed=1, failed=2)
    outcome.stdout.fnmatch_lines(
        [
            "*_ test_violated _*",
            "rsdrill experiment 'plugin-tiny': 1 of 1 SLOs failed",
            "  write_unavailable_s: observed *, threshold <= 0.01",
            "report: */test_violated/report.html",
            "*_ test_errs _*",
            f"rsdrill experiment 'plugin-tiny' ended error: sandbox: port {port} is already*",
            "report: */test_errs/report.html",
        ]
    )


def test_target_override_and_out_dir(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_override="""
        def test_runs_on_rs1(rsdrill):
            # No ledger: its read-back is not what this test is about, and it takes a while.
            run = rsdrill.run("tiny.yaml", probes__durability=None)
            assert run.result.target.topology == "rs1"
            assert len(run.result.target.members) == 1
        """
    )
    out = suite.path / "drills"
    outcome = suite.runpytest_subprocess("--rsdrill-target", "sandbox:rs1", "--rsdrill-out", out)
    outcome.assert_outcomes(passed=1)
    assert (out / "test_runs_on_rs1" / "result.json").is_file()


def test_bad_target_and_overrides_fail_before_anything_runs(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_bad="""
        def test_misspelt_override(rsdrill):
            rsdrill.run("tiny.yaml", target__electon_timeout="1s")

        def test_no_such_item(rsdrill):
            rsdrill.run("tiny.yaml", faults__3__at="1s")
        """
    )
    # A relative path is looked up beside the test file first (this file is not valid).
    (suite.path / "checks").mkdir()
    (suite.path / "checks" / "beside.yaml").write_text("name: beside\n")
    (suite.path / "checks" / "test_beside.py").write_text(
        "def test_beside(rsdrill):\n    rsdrill.run('beside.yaml')\n"
    )
    outcome = suite.runpytest_subprocess("-rf", "--rsdrill-target", "mongodb://db.example:27017")
    outcome.assert_outcomes(failed=3)
    outcome.stdout.fnmatch_lines(
        ["*--rsdrill-target: a URI replaces target.uri of platform local experiments, but the "
         "experiment's platform is sandbox*"]
    )  # fmt: skip
    outcome = suite.runpytest_subprocess("-rf")
    outcome.assert_outcomes(failed=3)
    outcome.stdout.fnmatch_lines_random(
        [
            "*/checks/beside.yaml:1:1: *target*",
            "*tiny.yaml (with overrides):*: target.electon_timeout: *election_timeout*",
            "*override faults__3__at: no item 3 in a list of 1*",
        ]
    )
    assert not list(suite.path.glob("rsdrill-home/journal/*")), "nothing may have been run"
    usage = suite.runpytest_subprocess("--rsdrill-target", "staging")
    assert usage.ret == pytest.ExitCode.USAGE_ERROR
    usage.stderr.fnmatch_lines(["*--rsdrill-target 'staging': give a mongodb:// URI*"])
