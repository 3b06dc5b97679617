"""Telling people and dashboards: a webhook (JSON, HMAC-signed), Slack, PagerDuty Events v2 on
a run's start and verdict, and Grafana annotations of each fault's window and the verdict.

Each is a plugin of the run's events (rsdrill/hooks.py), built from the experiment's `notify:`
and `grafana:` sections. Nothing here may fail or hang a run: every request has a bounded
timeout, is retried once after a refused connection or a 5xx answer (never after a timeout),
and a failure is logged (logger `rsdrill.notify`) without the URL's secrets.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from rsdrill.hooks import hookimpl

if TYPE_CHECKING:
    from pathlib import Path

    from rsdrill.experiment.integrations import GrafanaSection, Notification
    from rsdrill.history import FaultRecord, RunClock
    from rsdrill.result import Result

_log = logging.getLogger("rsdrill.notify")
SIGNATURE_HEADER = "X-Rsdrill-Signature"
"""`sha256=<hex HMAC-SHA256 of the body>` with the webhook's secret."""


def where(url: str) -> str:
    """A URL as logs may show it: scheme and host only (a Slack webhook's path is its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"


def split_login(url: str) -> tuple[str, tuple[str, str] | None]:
    """The URL without its `user:password@`, and that login (None without one): urllib would
    take it for part of the host name, and the server wants it as HTTP basic auth."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    login = (unquote(parts.username or ""), unquote(parts.password or ""))
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl(), login


def send(
    url: str,
    body: dict[str, Any],
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> dict[str, Any] | None:
    """Send `body` as JSON; the answer's JSON (or {}), None when it could not be delivered."""
    data = json.dumps(body, default=str).encode()
    request_headers = {"Content-Type": "application/json", **(headers or {})}
    target, login = split_login(url)
    if login is not None:
        token = base64.b64encode(":".join(login).encode()).decode()
        request_headers.setdefault("Authorization", f"Basic {token}")
    for attempt in (1, 2):
        request = urllib.request.Request(target, data=data, headers=request_headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                text = response.read()
            try:
                answer = json.loads(text) if text else {}
            except ValueError:
                answer = {}
            return answer if isinstance(answer, dict) else {}
        except urllib.error.HTTPError as exc:
            problem = f"HTTP {exc.code}"
            again = exc.code >= 500
        except TimeoutError:
            problem, again = f"no answer within {timeout_s:g} s", False
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                problem, again = f"no answer within {timeout_s:g} s", False
            else:
                problem, again = str(exc.reason), True
        except OSError as exc:
            problem, again = str(exc), True
        if not again or attempt == 2:
            _log.warning("notify: %s: not delivered: %s", where(url), problem)
            return None
        time.sleep(0.2)
    return None


def _summary(result: Result) -> str:
    from rsdrill.report.common import slo_observed, slo_title

    failed = [f"{slo_title(s)} (observed {slo_observed(s)})" for s in result.slo
              if not s.passed]  # fmt: skip
    text = f"rsdrill {result.experiment}: {result.verdict.upper()}"
    if result.error:
        text += f" ({result.error})"
    if failed:
        text += "; failed: " + "; ".join(failed)
    return text


@dataclass
class Notifier:
    """The experiment's `notify:` entries, told of the run's start and verdict."""

    notifications: tuple[Notification, ...]
    _run: dict[str, Any] = field(default_factory=dict)

    @hookimpl
    def rsdrill_run_started(self, experiment: str, run_id: str, out_dir: Path) -> None:
        self._run = {"experiment": experiment, "run_id": run_id, "out_dir": str(out_dir)}
        for entry in self.notifications:
            if "start" in entry.on:
                self._send(entry, "start", f"rsdrill {experiment}: started (run {run_id})")

    @hookimpl
    def rsdrill_verdict(self, result: Result) -> None:
        for entry in self.notifications:
            if result.verdict in entry.on:
                self._send(entry, result.verdict, _summary(result), result)

    def _send(
        self, entry: Notification, event: str, text: str, result: Result | None = None
    ) -> None:
        details = {**self._run, "event": event}
        if result is not None:
            details |= {"verdict": result.verdict, "exit_code": result.exit_code,
                        "error": result.error,
                        "slo": [s.model_dump(by_alias=True) for s in result.slo]}  # fmt: skip
        if entry.kind == "slack":
            send(entry.url, {"text": text}, timeout_s=entry.timeout)
        elif entry.kind == "pagerduty":
            key = os.environ.get(entry.secret_env or "", "")
            body = {
                "routing_key": key,
                "event_action": "trigger",
                "dedup_key": self._run.get("run_id"),
                "payload": {
                    "summary": text[:1024],
                    "source": "rsdrill",
                    "severity": "info" if event in ("start", "pass") else "error",
                    "custom_details": details,
                },
            }
            send(entry.url, body, timeout_s=entry.timeout)
        else:
            body = {"text": text, **details}
            data = json.dumps(body, default=str).encode()
            headers = {}
            if entry.secret_env:
                secret = os.environ.get(entry.secret_env, "").encode()
                digest = hmac.new(secret, data, hashlib.sha256).hexdigest()
                headers[SIGNATURE_HEADER] = f"sha256={digest}"
            send(entry.url, body, timeout_s=entry.timeout, headers=headers)


@dataclass
class GrafanaAnnotations:
    """Each fault's window and the verdict as Grafana annotations (HTTP API, a service account
    token from the environment), so any dashboard shows the chaos over the cluster's graphs."""

    section: GrafanaSection
    clock: Callable[[], RunClock | None]
    _ids: dict[int, int] = field(default_factory=dict)
    _experiment: str = ""

    @hookimpl
    def rsdrill_run_started(self, experiment: str, run_id: str, out_dir: Path) -> None:
        self._experiment = experiment

    @hookimpl
    def rsdrill_fault_applied(self, fault: FaultRecord) -> None:
        text = f"rsdrill {self._experiment}: {fault.kind} on {fault.target}"
        answer = self._post({"time": self._ms(fault.injected_at_s), "text": text,
                             "tags": [*self.section.tags, fault.kind]})  # fmt: skip
        if answer and "id" in answer:
            self._ids[fault.index] = int(answer["id"])

    @hookimpl
    def rsdrill_fault_reverted(self, fault: FaultRecord) -> None:
        annotation = self._ids.pop(fault.index, None)
        if annotation is None:
            return
        send(f"{self.section.url.rstrip('/')}/api/annotations/{annotation}",
             {"timeEnd": self._ms(fault.reverted_at_s)}, timeout_s=self.section.timeout,
             headers=self._auth(), method="PATCH")  # fmt: skip

    @hookimpl
    def rsdrill_verdict(self, result: Result) -> None:
        self._post({"time": int(time.time() * 1000), "text": _summary(result),
                    "tags": [*self.section.tags, "verdict", result.verdict]})  # fmt: skip

    def _post(self, body: dict[str, Any]) -> dict[str, Any] | None:
        if self.section.dashboard_uid:
            body["dashboardUID"] = self.section.dashboard_uid
        return send(f"{self.section.url.rstrip('/')}/api/annotations", body,
                    timeout_s=self.section.timeout, headers=self._auth())  # fmt: skip

    def _auth(self) -> dict[str, str]:
        token = os.environ.get(self.section.token_env, "")
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _ms(self, run_t_s: float | None) -> int:
        clock = self.clock()
        if clock is None or run_t_s is None:
            return int(time.time() * 1000)
        return int((clock.wall0 + run_t_s) * 1000)
