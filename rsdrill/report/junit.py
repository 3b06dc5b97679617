"""junit.xml: one testcase per SLO, so any CI that reads JUnit shows which promise broke.

The layout is the common denominator of Jenkins, GitLab and the GitHub Actions reporters: a
`<testsuites>` root holding one `<testsuite name="rsdrill.<experiment>">`, whose `<properties>`
carry every scalar metric so the numbers travel with the verdict.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from rsdrill.report.common import (
    scalar_metrics,
    slo_explanation,
    slo_observed,
    slo_outcome,
    slo_title,
)
from rsdrill.result import Result

COMPLETED = "experiment completed"

# XML 1.0 cannot carry most control characters even escaped; an error string from a crashed
# platform SDK may contain them, and one such byte would make the whole file unreadable.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def render_junit(result: Result, report_href: str = "report.html") -> str:
    """The JUnit XML document for `result`; `report_href` is where failures point readers."""
    suite_name = _clean(f"rsdrill.{result.experiment}")
    suites = ET.Element("testsuites", name="rsdrill")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=suite_name,
        timestamp=_clean(result.started_at),
        time=f"{result.duration_s:.3f}",
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in [("verdict", result.verdict), *scalar_metrics(result.metrics)]:
        shown = "null" if value is None else str(value)
        ET.SubElement(properties, "property", name=_clean(name), value=_clean(shown))

    failures = errors = skipped = 0
    for slo in result.slo:
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=_clean(slo_title(slo)))
        if slo_outcome(result, slo) == "not judged":
            skipped += 1
            ET.SubElement(case, "skipped", message="not judged: the run stopped before its "
                          "measurement ended")  # fmt: skip
        elif not slo.passed:
            failures += 1
            message = f"{slo_explanation(slo)}. Report: {report_href}"
            failure = ET.SubElement(case, "failure", message=_clean(message), type="SLO")
            failure.text = _clean(
                f"experiment: {result.experiment}\nSLO: {slo_title(slo)}\n"
                f"observed: {slo_observed(slo)}\nreport: {report_href}\n"
            )

    # A run that did not finish, or had nothing to judge, still needs a testcase of its own:
    # otherwise an aborted run with passing partial SLOs would look green.
    if not result.slo or result.verdict in ("error", "aborted"):
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=COMPLETED)
        reason = result.error or f"verdict {result.verdict}"
        if result.verdict in ("error", "aborted"):
            errors += 1
            error = ET.SubElement(case, "error", message=_clean(reason), type=result.verdict)
            error.text = _clean(f"{reason}\nreport: {report_href}\n")
        elif result.verdict == "fail":
            failures += 1
            ET.SubElement(case, "failure", message=_clean(reason), type="verdict")

    suite.set("tests", str(len(suite.findall("testcase"))))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    for attr in ("tests", "failures", "errors", "skipped"):
        suites.set(attr, suite.get(attr, "0"))
    suites.set("time", suite.get("time", "0"))

    ET.indent(suites)
    body = ET.tostring(suites, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'
