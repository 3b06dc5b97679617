"""Stop conditions from the team's monitoring, timed: a sandbox run with a secondary frozen and
`abort_on: [{prometheus: {query: drill_errors > 0, for: F}}]` against Debian's Prometheus
(scraping every second a page this bench writes), the page starting to report errors 10 s
into the run; then the same with a CloudWatch alarm (moto's server) set to ALARM.

For Prometheus the clock starts when the query first returns a series, as the bench sees by
asking the server itself every 50 ms; for CloudWatch when set_alarm_state returns. It stops
at the run's revert phase. The issue's bound: `for` + 2 s (an alarm has no `for`).

Usage: python bench/monitor_stop.py [--rounds 3] [--for 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.sandbox.hosts import free_port_base
from tests.harness.acting_run import run_acting
from tests.harness.moto_ec2 import client, moto_server
from tests.harness.prometheus import Prometheus, prometheus

QUERY = "drill_errors > 0"
QUIET, LOUD = "drill_errors 0\n", "drill_errors 3\n"
STARTS_AT_S = 10.0  # into the run, as the issue puts it


def _experiment(abort_on: dict[str, Any]) -> Experiment:
    return Experiment.model_validate({
        "name": "monitor-stop-bench",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "2s",
                   "heartbeat_interval": "500ms", "port_base": free_port_base(3)},
        "probes": {"availability": {"interval": "20ms"}},
        "faults": [{"at": "1s", "kind": "host-freeze", "select": "secondary", "duration": "90s"}],
        "observe": {"after_revert": "1s"},
        "abort_on": [abort_on],
    })  # fmt: skip


def _timed_run(exp: Experiment, out: Path, start: Callable[[], float]) -> tuple[float, str]:
    """Run `exp`; STARTS_AT_S after its probes began, `start()` makes the source say stop and
    returns when it did (monotonic). Seconds from then to the revert phase, and the verdict."""
    result, took = run_acting(exp, out, STARTS_AT_S, start)
    if result is None:
        raise SystemExit("the run did not end")
    return took, result.verdict


def _first_series(prom: Prometheus) -> float:
    """Serve errors from now on; the moment the query first returns a series."""
    prom.page.text = LOUD
    url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": QUERY})
    while True:
        with urllib.request.urlopen(url, timeout=2) as answer:
            if json.load(answer)["data"]["result"]:
                return time.monotonic()
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--for", dest="for_s", type=float, default=5.0)
    args = parser.parse_args()
    overs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rsdrill-monitor-") as tmp:
        work = Path(tmp)
        (work / "prometheus").mkdir()
        with prometheus(work / "prometheus", QUIET) as prom:
            for r in range(args.rounds):
                exp = _experiment({"prometheus": {"url": prom.url, "query": QUERY,
                                                  "for": f"{args.for_s:g}s"}})  # fmt: skip
                took, verdict = _timed_run(exp, work / f"prom{r}", lambda: _first_series(prom))
                prom.set(QUIET)
                overs.append(took - args.for_s)
                print(f"prometheus round {r + 1}: stopped {took:.2f} s after the first series "
                      f"(for {args.for_s:g} s: +{took - args.for_s:.2f} s), {verdict}")  # fmt: skip
        os.environ.update(AWS_ACCESS_KEY_ID="AKIARSDRILLBENCH0001", AWS_DEFAULT_REGION="us-east-1",
                          AWS_SECRET_ACCESS_KEY="rsdrill-bench-secret")  # fmt: skip
        with moto_server(work / "moto.log") as endpoint:
            watch = client(endpoint, "cloudwatch")
            for r in range(args.rounds):
                name = f"bench-{r}"
                watch.put_metric_alarm(
                    AlarmName=name, MetricName="5xx", Namespace="app", Statistic="Sum",
                    Period=60, EvaluationPeriods=1, Threshold=1,
                    ComparisonOperator="GreaterThanThreshold")  # fmt: skip

                def alarm(name: str = name) -> float:
                    watch.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason="bench")
                    return time.monotonic()

                exp = _experiment({"cloudwatch": {"alarm": name, "endpoint_url": endpoint}})
                took, verdict = _timed_run(exp, work / f"cw{r}", alarm)
                overs.append(took)
                print(f"cloudwatch round {r + 1}: stopped {took:.2f} s after ALARM, {verdict}")
    worst = max(overs)
    print(f"worst beyond for: +{worst:.2f} s (bound + 2 s: {worst / 2:.2f}x)")


if __name__ == "__main__":
    main()
