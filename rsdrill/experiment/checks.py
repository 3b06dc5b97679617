"""Steady-state checks of the user's own (`probes.checks`): an HTTP endpoint, a command, a
MongoDB query or a Python callable registered as a plugin, each sampled on the run's clock like
the built-in probes and judged as `probe.<name>.unavailable_s` and friends."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from rsdrill.fields import Duration, FieldProblem, Strict
from rsdrill.hooks import PROBE_GROUP

CheckName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]


class HttpCheck(Strict):
    """Healthy when the URL answers one of `status` within `latency_max`."""

    url: str = Field(pattern=r"^https?://", description="GET this URL")
    status: tuple[int, ...] = Field((200,), min_length=1, description="healthy status codes")
    latency_max: Duration | None = Field(None, description="a slower answer is a failure")


class QueryCheck(Strict):
    """Healthy when at least `min_count` documents match `filter`."""

    db: str
    collection: str
    filter: dict[str, Any] = Field(default_factory=dict)
    min_count: int = Field(1, ge=0)
    uri: str | None = Field(None, description="another deployment's URI (default: the target's)")


class CheckProbe(Strict):
    """One steady-state check: exactly one of http, command, mongodb_query, plugin."""

    http: HttpCheck | None = None
    command: tuple[str, ...] | None = Field(
        None, min_length=1, description="a program and its arguments; exit status 0 is healthy"
    )
    mongodb_query: QueryCheck | None = None
    plugin: str | None = Field(None, description=f"an entry point of group {PROBE_GROUP}")
    interval: Duration = Field(0.1, gt=0)
    timeout: Duration = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _one_kind(self) -> CheckProbe:
        given = [k for k in ("http", "command", "mongodb_query", "plugin") if getattr(self, k)]
        if len(given) != 1:
            raise FieldProblem(
                (),
                "a check needs exactly one of http, command, mongodb_query, plugin"
                + (f" (got {', '.join(given)})" if given else ""),
            )
        if self.plugin is not None and self.plugin not in plugin_names():
            known = ", ".join(sorted(plugin_names())) or "none installed"
            raise FieldProblem(
                ("plugin",), f"no {PROBE_GROUP} entry point {self.plugin!r} (known: {known})"
            )
        return self


def plugin_names() -> set[str]:
    from importlib.metadata import entry_points

    return {ep.name for ep in entry_points(group=PROBE_GROUP)}
