"""Asking the team's own monitoring whether a run must stop (`abort_on:` Prometheus queries and
CloudWatch alarms): one answer per call, within the source's timeout. `Unreachable` when the
source could not be asked; `MonitorError` when it answered that the question is wrong (a
query it cannot parse, an alarm it does not have)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Protocol

from rsdrill.experiment.stop_sources import (
    CloudWatchCondition,
    MonitorCondition,
    OnUnreachable,
    PrometheusCondition,
)
from rsdrill.redact import redact_uri


class Unreachable(Exception):
    """The source did not answer."""


class MonitorError(Exception):
    """The source answered that the question cannot be answered."""


class Monitor(Protocol):
    name: str
    for_s: float
    on_unreachable: OnUnreachable

    def firing(self) -> bool:
        """Whether the source says stop now (raises Unreachable, MonitorError)."""


class PrometheusMonitor:
    def __init__(self, condition: PrometheusCondition) -> None:
        self.source = condition.prometheus
        self.name = f"prometheus {redact_uri(self.source.url)} query {self.source.query!r}"
        self.for_s, self.on_unreachable = self.source.for_s, self.source.on_unreachable

    def firing(self) -> bool:
        """An instant query: a vector or matrix with a series, a scalar not 0."""
        url = f"{self.source.url}/api/v1/query?" + urllib.parse.urlencode(
            {"query": self.source.query, "timeout": f"{self.source.timeout:g}s"})  # fmt: skip
        try:
            with urllib.request.urlopen(url, timeout=self.source.timeout) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            body = _error_body(exc)
            if exc.code >= 500 or body is None:
                raise Unreachable(f"{self.name}: HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise Unreachable(f"{self.name}: {exc}") from None
        if body.get("status") != "success":
            raise MonitorError(f"{self.name}: {body.get('errorType')}: {body.get('error')}")
        data = body.get("data") or {}
        if data.get("resultType") in ("vector", "matrix"):
            return bool(data.get("result"))
        value = (data.get("result") or [None, "0"])[1]
        return value not in ("0", "NaN", "")


def _error_body(exc: urllib.error.HTTPError) -> dict[str, object] | None:
    try:
        body = json.loads(exc.read())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


class CloudWatchMonitor:
    def __init__(self, condition: CloudWatchCondition) -> None:
        self.source = condition.cloudwatch
        self.name = f"cloudwatch alarm {self.source.alarm!r}"
        self.for_s, self.on_unreachable = 0.0, self.source.on_unreachable
        self._client: object | None = None

    def _cloudwatch(self) -> object:
        if self._client is None:
            import boto3
            from botocore.config import Config

            config = Config(connect_timeout=self.source.timeout, read_timeout=self.source.timeout,
                            retries={"max_attempts": 1})  # fmt: skip
            self._client = boto3.client(
                "cloudwatch", region_name=self.source.region,
                endpoint_url=self.source.endpoint_url, config=config)  # fmt: skip
        return self._client

    def firing(self) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            kinds = ["MetricAlarm", "CompositeAlarm"]
            found = self._cloudwatch().describe_alarms(  # type: ignore[attr-defined]
                AlarmNames=[self.source.alarm], AlarmTypes=kinds
            )
        except ClientError as exc:
            raise MonitorError(f"{self.name}: {exc}") from None
        except BotoCoreError as exc:
            raise Unreachable(f"{self.name}: {exc}") from None
        alarms = [*found.get("MetricAlarms", []), *found.get("CompositeAlarms", [])]
        if not alarms:
            raise MonitorError(f"{self.name}: no such alarm")
        return any(a.get("StateValue") == "ALARM" for a in alarms)


def monitor(condition: MonitorCondition) -> Monitor:
    if isinstance(condition, PrometheusCondition):
        return PrometheusMonitor(condition)
    return CloudWatchMonitor(condition)
