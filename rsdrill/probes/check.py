"""Steady-state checks of the user's own: each sample is healthy or not, recorded as an op of
probe `check:<name>` with what was seen (status, exit code, count, error)."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from rsdrill.history import CHECK_PREFIX, History, RunClock
from rsdrill.hooks import PROBE_GROUP
from rsdrill.probes.base import Probe, classify
from rsdrill.redact import redact_uri

if TYPE_CHECKING:
    from rsdrill.experiment.checks import CheckProbe, HttpCheck, QueryCheck

"""Entry-point group of check plugins: a callable taking no argument; truthy means healthy."""


class Unhealthy(Exception):
    """A sample that answered, but not as a healthy system does."""

    def __init__(self, detail: dict[str, Any]) -> None:
        super().__init__(str(detail))
        self.detail = detail


Sample = Callable[[], dict[str, Any]]
"""Takes one sample: returns what it saw when healthy; raises Unhealthy or TimeoutError."""


class CheckLoop(Probe):
    """Samples one check every interval."""

    def __init__(
        self, name: str, history: History, clock: RunClock, config: CheckProbe, uri: str
    ) -> None:
        self.name = f"{CHECK_PREFIX}{name}"
        super().__init__(history, clock, config.interval)
        self._client: MongoClient[dict[str, Any]] | None = None
        self._sample = self._sampler(config, uri)

    def tick(self) -> None:
        t_start = self.clock.now()
        try:
            detail = self._sample()
        except Unhealthy as exc:
            self.record("check", None, t_start, "error", exc.detail)
        except (TimeoutError, subprocess.TimeoutExpired):
            self.record("check", None, t_start, "timeout", {"error": "timed out"})
        except PyMongoError as exc:
            outcome, detail = classify(exc)
            self.record("check", None, t_start, outcome, detail)
        else:
            self.record("check", None, t_start, "ok", detail)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _sampler(self, config: CheckProbe, uri: str) -> Sample:
        timeout = config.timeout
        if config.http is not None:
            http = config.http
            return lambda: _http(http, timeout)
        if config.command is not None:
            argv = list(config.command)
            return lambda: _command(argv, timeout)
        if config.mongodb_query is not None:
            query = config.mongodb_query
            self._client = MongoClient(
                query.uri or uri, serverSelectionTimeoutMS=int(timeout * 1000),
                socketTimeoutMS=int(timeout * 1000), connectTimeoutMS=int(timeout * 1000),
            )  # fmt: skip
            client = self._client
            return lambda: _query(client, query, timeout)
        assert config.plugin is not None
        return _plugin(config.plugin, timeout)


def _http(check: HttpCheck, timeout_s: float) -> dict[str, Any]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(check.url, timeout=timeout_s) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise TimeoutError from None
        raise Unhealthy({"error": redact_uri(str(exc.reason))[:300]}) from None
    except OSError as exc:  # a reset or a read timeout after the headers
        if isinstance(exc, TimeoutError):
            raise
        raise Unhealthy({"error": str(exc)[:300]}) from None
    latency_s = time.monotonic() - started
    seen: dict[str, Any] = {"status": status, "latency_s": round(latency_s, 6)}
    if status not in check.status:
        raise Unhealthy(seen | {"error": f"status {status}"})
    if check.latency_max is not None and latency_s > check.latency_max:
        raise Unhealthy(seen | {"error": f"slower than {check.latency_max:g} s"})
    return seen


def _command(argv: list[str], timeout_s: float) -> dict[str, Any]:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except OSError as exc:
        raise Unhealthy({"error": f"cannot run {argv[0]}: {exc.strerror or exc}"}) from None
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip()[-200:]
        raise Unhealthy({"exit_status": done.returncode, "error": tail or "non-zero exit"})
    return {"exit_status": 0}


def _query(
    client: MongoClient[dict[str, Any]], check: QueryCheck, timeout_s: float
) -> dict[str, Any]:
    collection = client[check.db][check.collection]
    count = collection.count_documents(check.filter, maxTimeMS=int(timeout_s * 1000))
    if count < check.min_count:
        raise Unhealthy({"count": count, "error": f"{count} < {check.min_count} documents"})
    return {"count": count}


def _plugin(name: str, timeout_s: float) -> Sample:
    from importlib.metadata import entry_points

    (point,) = entry_points(group=PROBE_GROUP, name=name)  # checked when loaded
    check: Callable[[], object] = point.load()

    def sample() -> dict[str, Any]:
        started = time.monotonic()
        try:
            healthy = check()
        except Exception as exc:  # the plugin's own failure is an unhealthy sample
            raise Unhealthy({"error": repr(exc)[:300]}) from None
        if time.monotonic() - started > timeout_s:  # a callable cannot be interrupted
            raise TimeoutError
        if not healthy:
            raise Unhealthy({"error": f"returned {healthy!r}"[:300]})
        return {}

    return sample
