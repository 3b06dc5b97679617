"""Stop conditions from the monitoring a team already has, beside rsdrill's own abort
conditions in `abort_on:`: a Prometheus query (the run stops once it has returned a series
for `for`) and a CloudWatch alarm (the run stops while it is in ALARM). A source that cannot
be asked stops the run too (`on_unreachable: abort`, the default) or is recorded as ignored
(`on_unreachable: ignore`): never a silent pass."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rsdrill.fields import Duration, Strict

OnUnreachable = Literal["abort", "ignore"]


class PrometheusSource(Strict):
    url: str = Field(description="the Prometheus server, e.g. http://prometheus:9090")
    query: str = Field(
        description="PromQL; the run stops once it has returned a series for `for` (e.g. "
        "'sum(rate(http_requests_total{code=~\"5..\"}[1m])) > 5')"
    )
    for_s: Duration = Field(0.0, alias="for", description="how long it must keep returning one")
    timeout: Duration = Field(5.0, description="how long one query may take")
    on_unreachable: OnUnreachable = "abort"

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("an http:// or https:// URL of the Prometheus server")
        return url.rstrip("/")

    @field_validator("query")
    @classmethod
    def _query(cls, query: str) -> str:
        if not query.strip():
            raise ValueError("an empty query")
        return query


class CloudWatchSource(Strict):
    alarm: str = Field(description="the alarm's name; the run stops while it is in ALARM")
    region: str | None = Field(None, description="its region (default: the AWS settings')")
    endpoint_url: str | None = Field(None, description="another CloudWatch endpoint")
    timeout: Duration = Field(5.0, description="how long one DescribeAlarms may take")
    on_unreachable: OnUnreachable = "abort"


class PrometheusCondition(Strict):
    prometheus: PrometheusSource


class CloudWatchCondition(Strict):
    cloudwatch: CloudWatchSource


MonitorCondition = PrometheusCondition | CloudWatchCondition
