"""Reports from a hand-built run (tests/report_sample.py): files, JUnit, Markdown, HTML, size."""

from __future__ import annotations

import json
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from report_sample import KILLED, MEMBERS, sample_ops, sample_result

from rsdrill.errors import RsdrillError
from rsdrill.history import Op
from rsdrill.report import ReportError, write_reports
from rsdrill.report.common import fmt_number, scalar_metrics
from rsdrill.report.html import render_html
from rsdrill.report.junit import render_junit
from rsdrill.report.markdown import render_summary
from rsdrill.report.timeline import MAX_RUNS, outcome_runs, timeline_data, zone_strips
from rsdrill.result import FaultResult, Result, SloResult, Stall, StalledGap

HOSTILE = "</script><script>alert('x')</script><img src=x onerror=alert(1)> & | `ok`"


@pytest.fixture(scope="module")
def ops() -> list[Op]:
    return sample_ops()


def embedded(page: str) -> dict:
    """The JSON the page embeds for its chart."""
    match = re.search(r'<script type="application/json" id="rsdrill-data">(.*?)</script>', page)
    assert match, "no embedded data block"
    return json.loads(match.group(1))


# -- write_reports ---------------------------------------------------------------------------------


def test_write_reports_writes_every_file(tmp_path: Path, ops: list[Op]) -> None:
    out = tmp_path / "nested" / "out"
    paths = write_reports(out, sample_result(), ops)

    names = {kind: path.name for kind, path in paths.items()}
    assert names == {
        "result": "result.json",
        "junit": "junit.xml",
        "html": "report.html",
        "summary": "summary.md",
        "history": "history.jsonl",
    }
    assert all(path.parent == out and path.stat().st_size > 0 for path in paths.values())
    assert Result.from_json(paths["result"].read_text()) == sample_result()
    assert json.loads(paths["result"].read_text())["slo"][0]["pass"] is False

    lines = paths["history"].read_text().splitlines()
    assert len(lines) == len(ops)
    first = json.loads(lines[0])
    assert set(first) == {"probe", "op", "member", "t_start", "t_end", "outcome", "detail"}
    assert first["probe"] == ops[0].probe and first["t_end"] == ops[0].t_end


# -- junit.xml -------------------------------------------------------------------------------------


def test_a_report_that_cannot_be_written_leaves_no_stale_or_partial_file(
    tmp_path: Path, ops: list[Op]
) -> None:
    # Yesterday's reports in the same --out; today junit.xml cannot be written (a directory in
    # the way stands for a full disk: the same OSError from the same write).
    for name in ("junit.xml", "summary.md", "report.html"):
        (tmp_path / name).write_text("yesterday's\n")
    (tmp_path / "junit.xml").unlink()
    (tmp_path / "junit.xml").mkdir()

    with pytest.raises(ReportError, match=r"cannot write .*junit\.xml: Is a directory") as raised:
        write_reports(tmp_path, sample_result(), ops)

    assert isinstance(raised.value, RsdrillError)
    assert raised.value.result == sample_result()
    assert Result.from_json((tmp_path / "result.json").read_text()) == sample_result()
    # No report of yesterday's left for CI to publish as today's, and no half-written one.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml", "result.json"]
    assert not list((tmp_path / "junit.xml").iterdir())


def test_junit_has_a_testcase_per_slo_and_the_failure_explained() -> None:
    root = ET.fromstring(render_junit(sample_result()))
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "rsdrill.rs3-primary-kill"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "0")

    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "write_unavailable_s <= 8",
        "failover_s <= 12.7",
        "lost_acknowledged_writes == 0",
    ]
    assert {c.get("classname") for c in cases} == {"rsdrill.rs3-primary-kill"}
    failure = cases[0].find("failure")
    assert failure is not None
    message = failure.get("message", "")
    for expected in ("write_unavailable_s", "<= 8", "10.02", "report.html"):
        assert expected in message
    assert all(list(case) == [] for case in cases[1:])


def test_junit_properties_carry_every_scalar_metric() -> None:
    root = ET.fromstring(render_junit(sample_result()))
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["write_unavailable_s"] == "10.02"
    assert props["failover_parts.election_s"] == "1.6"
    assert props[f"recovery_s.{KILLED}"] == "7.0"
    assert props["latency_ms.p99"] == "48.0"
    assert props["lost_acknowledged_writes"] == "0"
    assert props["no_primary_s"] == "null"
    assert props["verdict"] == "fail"
    assert "member_states" not in "".join(props)  # lists are not scalars


def test_junit_error_verdict_adds_an_error_testcase_with_the_error() -> None:
    error = 'platform crashed: <boom> & \x00 "quoted"\nsecond line'
    root = ET.fromstring(render_junit(sample_result(error=error)))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("errors") == "1"
    case = suite.findall("testcase")[-1]
    assert case.get("name") == "experiment completed"
    element = case.find("error")
    assert element is not None and element.get("type") == "error"
    assert "platform crashed: <boom> &" in element.get("message", "")
    assert "second line" in (element.text or "")


@pytest.mark.parametrize(("verdict", "child"), [("pass", None), ("aborted", "error")])
def test_junit_without_slos_has_one_testcase_by_verdict(verdict: str, child: str | None) -> None:
    result = sample_result().model_copy(
        update={"slo": [], "verdict": verdict, "error": "guard: two members down"}
    )
    cases = ET.fromstring(render_junit(result)).findall("testsuite/testcase")
    assert [c.get("name") for c in cases] == ["experiment completed"]
    assert [e.tag for e in cases[0]] == ([child] if child else [])


def test_junit_escapes_a_hostile_experiment_name() -> None:
    result = sample_result(experiment=HOSTILE)
    suite = ET.fromstring(render_junit(result)).find("testsuite")
    assert suite is not None and suite.get("name") == f"rsdrill.{HOSTILE}"


# -- summary.md ------------------------------------------------------------------------------------


def test_summary_has_verdict_slos_metrics_faults_and_report() -> None:
    text = render_summary(sample_result(), "out/report.html")
    assert text.startswith("## rsdrill: rs3-primary-kill: FAIL")
    assert "verdict: **fail** (exit code 1)" in text
    assert "| `write_unavailable_s` | \\<= 8 | 10.02 | **FAIL** |" in text
    assert "| `failover_s` | \\<= 12.7 | 9.87 | pass |" in text
    assert "| `failover_parts.detection_s` | 8.1 |" in text
    assert "| `latency_ms.p99` | 48 |" in text
    assert "no_primary_s" not in text  # not measured: left out of the key metrics
    assert f"| host-kill | {KILLED} | 4.998 s | 5 s | 20 s |" in text  # due, injected, reverted
    assert "`out/report.html`" in text


def test_summary_escapes_names_and_fences_errors() -> None:
    error = "boom ``` <b>bold</b>"
    text = render_summary(sample_result(experiment=HOSTILE, error=error), "report.html")
    fence = "````text\nboom ``` <b>bold</b>\n````"
    assert fence in text  # longer than the error's own backtick run: it cannot close early
    title = text.splitlines()[0]
    assert title.startswith("## rsdrill: \\</script\\>\\<script\\>alert")
    # Every character that could open markup or split a table cell is backslash-escaped.
    assert not re.search(r"(?<!\\)[<>|`&]", title)


# -- report.html -----------------------------------------------------------------------------------


def test_html_has_header_tables_and_the_chart_root(ops: list[Op]) -> None:
    page = render_html(sample_result(), ops)
    assert '<span class="verdict verdict-fail" id="verdict">FAIL</span>' in page
    assert '<svg id="timeline"' in page
    assert '<table id="slo">' in page and '<table id="metrics">' in page
    assert '<tr class="slo-fail"><td>write_unavailable_s</td><td>&lt;= 8</td>' in page
    # The fault's due time beside its injection: rsdrill's own delay can be read off.
    assert "<th>due (s)</th><th>injected (s)</th>" in page
    assert f'<td>{KILLED}</td><td class="num">4.998</td><td class="num">5</td>' in page
    assert "Content-Security-Policy" in page


def test_html_references_nothing_outside_itself(ops: list[Op]) -> None:
    page = render_html(sample_result(), ops)
    assert not re.search(r"https?:|//[a-z]", page, re.IGNORECASE)
    assert not re.search(r"\s(src|href)\s*=", page)
    assert "@import" not in page and "url(" not in page.replace("url(#down-hatch)", "")


def test_html_escapes_hostile_names_and_errors(ops: list[Op]) -> None:
    result = sample_result(experiment=HOSTILE, error=HOSTILE)
    result.faults[0] = FaultResult(
        kind="host-kill", target=HOSTILE, injected_at_s=5, reverted_at_s=20
    )
    page = render_html(result, ops)
    # Only the page's own two script elements; the name shows up as text only.
    assert page.count("<script") == 2
    assert page.count("</script>") == 2
    assert "<img" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(&#x27;x&#x27;)" in page
    data = embedded(page)
    assert data["result"]["experiment"] == HOSTILE
    assert data["timeline"]["faults"][0]["target"] == HOSTILE


def test_html_embeds_the_timeline(ops: list[Op]) -> None:
    timeline = embedded(render_html(sample_result(), ops))["timeline"]
    assert timeline["end"] == 40
    assert timeline["faults"] == [
        {"kind": "host-kill", "target": KILLED, "t0": 5, "t1": 20, "reverted": True, "row": 0}
    ]
    assert [s["probe"] for s in timeline["strips"]] == ["write", "read", "ledger", "load"]

    write = timeline["strips"][0]["runs"]
    outcomes = [timeline["outcomes"][run[2]] for run in write]
    assert outcomes == ["ok", "timeout", "error", "ok"]
    timeout, error = write[1], write[2]
    assert timeout[0] == pytest.approx(5.0, abs=0.03)
    assert error[1] == pytest.approx(15.0, abs=0.03)

    lanes = {lane["member"]: lane["segments"] for lane in timeline["states"]}
    assert list(lanes) == MEMBERS
    assert lanes[KILLED][1] == [5, 20, "DOWN"]
    assert lanes[KILLED][-1] == [27, 40, "SECONDARY"]

    assert [s["probe"] for s in timeline["latency"]] == ["write", "read", "load"]
    assert max(p[1] for p in timeline["lag"][KILLED]) == pytest.approx(2.4)


def test_html_size_is_bounded_for_100k_ops(ops: list[Op]) -> None:
    rng = random.Random(1)
    flapping = [
        Op("load", "update", None, t, t + 0.003, "error" if rng.random() < 0.1 else "ok", {})
        for t in (i * 0.0004 for i in range(100_000))
    ]
    page = render_html(sample_result(), ops + flapping)
    assert len(page.encode()) < 600_000
    load = embedded(page)["timeline"]["strips"][3]
    assert load["probe"] == "load" and len(load["runs"]) <= MAX_RUNS


# -- timeline reduction ----------------------------------------------------------------------------


def _op(t: float, outcome: str, duration: float = 0.002) -> Op:
    return Op("write", "insert", None, t, t + duration, outcome, {})


def test_runs_merge_equal_outcomes_in_start_order() -> None:
    ops = [_op(0.04, "error"), _op(0.0, "ok"), _op(0.02, "ok"), _op(0.06, "timeout", 0.25)]
    assert outcome_runs(ops) == [
        [0.0, 0.022, 0, 2, 0],
        [0.04, 0.042, 2, 1, 1],
        [0.06, 0.31, 1, 1, 1],
    ]


def test_bucketed_runs_are_bounded_and_never_hide_a_failure() -> None:
    ops = [_op(i * 0.001, "ok" if i % 2 else "timeout") for i in range(20_000)]
    ops += [_op(30 + i * 0.001, "ok") for i in range(20_000)]
    ops.append(_op(40.0, "error"))
    ops += [_op(40.01 + i * 0.001, "ok") for i in range(10_000)]
    runs = outcome_runs(ops)
    assert len(runs) <= MAX_RUNS
    assert sum(run[3] for run in runs) == len(ops)
    assert sum(run[4] for run in runs) == 10_001
    errors = [run for run in runs if run[2] == 2]
    assert len(errors) == 1 and errors[0][0] <= 40.0 <= errors[0][1]


def test_a_zone_is_up_while_one_of_its_members_answers() -> None:
    def poll(member: str, t: float, ok: bool) -> Op:
        return Op("failover", "hello", member, t, t + 0.01, "ok" if ok else "timeout")

    zones = {"a:1": "east", "a:2": "east", "a:3": "west"}
    polls = [poll(m, t / 10, not (m != "a:2" and 10 <= t < 20)) for t in range(30)
             for m in zones]  # fmt: skip
    strips = {s["probe"]: s["runs"] for s in zone_strips(zones, polls)}
    # east kept a member answering throughout; west had none from 1 s to 2 s.
    assert [r[2] for r in strips["zone east"]] == [0]
    assert [(r[0], r[2]) for r in strips["zone west"]] == [(0.0, 0), (1.0, 2), (2.0, 0)]
    assert zone_strips({}, polls) == []


def test_overlapping_faults_get_their_own_rows() -> None:
    result = sample_result().model_copy(
        update={
            "faults": [
                FaultResult(kind="host-kill", target="a", injected_at_s=5, reverted_at_s=20),
                FaultResult(kind="host-freeze", target="b", injected_at_s=10, reverted_at_s=None),
                FaultResult(kind="stepdown", target="c", injected_at_s=25, reverted_at_s=26),
                FaultResult(kind="stepdown", target="d", injected_at_s=None, reverted_at_s=None),
            ]
        }
    )
    faults = timeline_data(result, [])["faults"]
    assert [(f["target"], f["row"], f["t1"], f["reverted"]) for f in faults] == [
        ("a", 0, 20, True),
        ("b", 1, 40, False),
        ("c", 0, 26, True),
    ]


def test_scalar_metrics_flatten_and_format() -> None:
    names = dict(scalar_metrics(sample_result().metrics))
    assert names["recovery_s.127.0.0.1:28018"] is None
    assert names["failover_parts.client_rediscovery_s"] == 0.17
    assert not any(name.startswith(("member_states", "lost_acknowledged_seqs")) for name in names)
    assert [fmt_number(v) for v in (None, 3, 2.0, 0.1234, 9.87)] == [
        "n/a",
        "3",
        "2",
        "0.123",
        "9.87",
    ]


def test_an_ha_restart_shows_its_phases_in_the_summary_and_the_page(ops: list[Op]) -> None:
    result = sample_result()
    result.faults[0].detail["ha"] = {
        "model": {"detect_s": 15.0, "boot_s": None}, "detect_s": 15.0, "boot_s": 4.25,
        "member_start_s": 0.5, "back_s": 19.75}  # fmt: skip
    line = (
        f"host-kill on {KILLED}: detection 15 s + boot 4.25 s + member start 0.5 s = back "
        "19.75 s after the failure (HA model: detect 15 s, the VM boots by itself)"
    )
    assert f"- {line}" in render_summary(result, "report.html")
    assert line in render_html(result, ops)
    assert "HA model" not in render_summary(sample_result(), "report.html")


def test_a_stall_of_this_process_is_said_in_the_summary_and_the_page(ops: list[Op]) -> None:
    result = sample_result()
    result.metrics.probe_stalls = [Stall(at_s=14.2, seconds=2.1)]
    result.metrics.probe_stalled_gaps = [
        StalledGap(metric="write_unavailable_s", start_s=13.9, end_s=16.2, stalled_s=2.1,
                   stall_at_s=14.2),
    ]  # fmt: skip
    line = (
        "probes: this process stalled 2.1 s at t=14.2 s; the write gap 13.9-16.2 s overlaps it: "
        "it may be this machine's, not the cluster's"
    )
    assert f"> **{line}**" in render_summary(result, "report.html")
    assert line.replace("'", "&#x27;") in render_html(result, ops)
    # Nothing is said of a process that did not stall.
    assert "this process stalled" not in render_summary(sample_result(), "report.html")
    assert 'id="stall"' not in render_html(sample_result(), ops)


@pytest.mark.parametrize(
    ("threshold", "observed", "passed", "condition", "seen"),
    [
        (15, 15.0004, False, "<= 15", "15.0004"),  # before: "observed 15", FAIL
        (0.0005, 0.066, False, "<= 0.0005", "0.066"),  # before: "<= 0"
        (0.0005, 0.0002, True, "<= 0.0005", "0"),  # on its side: 3 decimals as before
        (0.00001, 0.0001, False, "<= 0.00001", "0.0001"),  # not 1e-05
        (15, 11.11111, True, "<= 15", "11.111"),
    ],
)
def test_an_slo_s_threshold_and_observed_value_read_on_the_side_they_are_on(
    threshold: float, observed: float, passed: bool, condition: str, seen: str
) -> None:
    slo = SloResult(metric="write_unavailable_s", op="<=", threshold=threshold,
                    observed=observed, passed=passed)  # fmt: skip
    verdict = "pass" if passed else "fail"
    result = sample_result().model_copy(update={"slo": [slo], "verdict": verdict})
    title = f"write_unavailable_s {condition}"
    explained = f"write_unavailable_s = {seen}; required {condition}: "
    junit = ET.fromstring(render_junit(result, report_href="report.html"))
    (case,) = junit.iter("testcase")
    assert case.get("name") == title
    if not passed:
        failure = case.find("failure")
        assert failure is not None and failure.get("message", "").startswith(explained)
        assert f"observed: {seen}\n" in (failure.text or "")
    assert f"| `write_unavailable_s` | \\{condition} | {seen} |" in render_summary(result, "r.html")


def test_an_unfinished_run_judges_no_slo_it_seemed_to_meet(ops: list[Op]) -> None:
    """An aborted run stopped measuring early (a write gap still open read short): a pass is
    not judged, a violation already seen stands, in every report."""
    slos = [
        SloResult(metric="write_unavailable_s", op="<=", threshold=15, observed=2.5, passed=True),
        SloResult(metric="failover_s", op="<=", threshold=1, observed=3.0, passed=False),
    ]
    result = sample_result().model_copy(
        update={"slo": slos, "verdict": "aborted", "error": "aborted by signal"}
    )
    suite = ET.fromstring(render_junit(result)).find("testsuite")
    assert suite is not None
    assert (suite.get("skipped"), suite.get("failures"), suite.get("errors")) == ("1", "1", "1")
    cases = {c.get("name"): [e.tag for e in c] for c in suite.findall("testcase")}
    assert cases["write_unavailable_s <= 15"] == ["skipped"]
    assert cases["failover_s <= 1"] == ["failure"]
    summary = render_summary(result, "report.html")
    assert "| 2.5 | not judged |" in summary and "| 3 | **FAIL** |" in summary
    page = render_html(result, ops)
    assert '<span class="res-unjudged">not judged</span>' in page
    assert '<span class="res-fail">FAIL</span>' in page
    # The same SLOs of a finished run are judged as measured.
    finished = render_junit(result.model_copy(update={"verdict": "fail", "error": None}))
    assert 'skipped="0"' in finished and "<skipped" not in finished
