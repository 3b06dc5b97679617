"""Where a run is told about besides its files: `notify:` (webhook, Slack, PagerDuty) and
`grafana:` (annotations). Secrets stay in the environment: the sections name variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rsdrill.fields import Duration, FieldProblem, Strict

RunEvent = Literal["start", "pass", "fail", "aborted", "error"]
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"


class Notification(Strict):
    """One place told of the run's start and verdict."""

    kind: Literal["webhook", "slack", "pagerduty"] = Field(
        description="webhook: JSON with an HMAC-SHA256 signature header; slack: an incoming "
        "webhook; pagerduty: an Events v2 trigger"
    )
    url: str = Field(
        PAGERDUTY_EVENTS_URL,
        pattern=r"^https?://",
        description="where to POST (a Slack webhook URL is a secret: give it as ${VAR})",
    )
    secret_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the environment variable holding the webhook's HMAC key, or PagerDuty's "
        "routing key",
    )
    on: tuple[RunEvent, ...] = Field(
        ("start", "pass", "fail", "aborted", "error"), min_length=1, description="which events"
    )
    timeout: Duration = Field(5.0, gt=0, le=60, description="per request (one retry)")

    @model_validator(mode="after")
    def _complete(self) -> Notification:
        if self.kind == "pagerduty" and not self.secret_env:
            raise FieldProblem(("secret_env",), "pagerduty needs the routing key's variable")
        if self.kind != "pagerduty" and "url" not in self.model_fields_set:
            raise FieldProblem(("url",), f"{self.kind} needs `url`")
        return self


class GrafanaSection(Strict):
    """Annotations of each fault's window and the verdict on a Grafana."""

    url: str = Field(pattern=r"^https?://", description="Grafana's base URL")
    token_env: str = Field(
        "GRAFANA_TOKEN",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the environment variable holding a service account token",
    )
    dashboard_uid: str | None = Field(None, description="only on this dashboard (default: all)")
    tags: tuple[str, ...] = ("rsdrill",)
    timeout: Duration = Field(5.0, gt=0, le=60)
