"""Run history: every run's verdict and metrics in a local SQLite file, and regression detection.

Two tables. `run` has one row per run (experiment, the cluster it ran against, started_at in
ISO 8601 UTC, verdict, duration_s, out_dir, the whole `metrics` object as JSON);
`metric(run_id, name, value)` has one row per scalar metric of that run, named as in SLOs
(`write_unavailable_s`, `latency_ms.p99`, `recovery_s.max`, `recovery_s.<host:port>`), NULL
when it was not measured, so trends can be queried with plain SQL.

A regression is a run whose metric lies above the rolling median of the same experiment's
previous runs on the same cluster by more than k robust standard deviations: k * 1.4826 * MAD
(median absolute deviation). The 1.4826 makes the scaled MAD estimate the standard deviation of
normally distributed noise, so k = 3 flags about 1 run in 700 by chance rather than 1 in 45
with the raw MAD — a nightly job that fails on a regression must not cry wolf. The MAD is
floored at 5 % of the median (and 0.01 in absolute terms), so that a perfectly flat history
does not turn the smallest jitter into a regression while a jump from 0 to 1 lost write is
still flagged.
"""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
import statistics
from collections.abc import Iterable, Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsdrill.errors import RsdrillError
from rsdrill.runs import Baseline, Regression, Run

if TYPE_CHECKING:
    from pymongo.collection import Collection

    from rsdrill.result import Metrics, Result

# The metrics a history table shows and checks unless told otherwise: the ones where bigger is
# worse (acknowledged_writes, for one, is not) and that compare across runs (member hosts change
# with every sandbox, so recovery_s.<host:port> does not).
KEY_METRICS: tuple[str, ...] = (
    "write_unavailable_s",
    "failover_s",
    "recovery_s.max",
    "lost_acknowledged_writes",
    "latency_ms.p99",
)

# Verdicts whose metrics cover the whole experiment; an aborted or failed-to-run experiment
# measured only part of it, so it neither forms a baseline nor is judged against one.
JUDGED_VERDICTS = frozenset({"pass", "fail"})

MAD_SCALE = 1.4826
MAD_FLOOR_RELATIVE = 0.05
MAD_FLOOR_ABSOLUTE = 0.01
MIN_HISTORY = 5

SCHEMA_VERSION = 2
"""1: no cluster; 2: each run's cluster. The SQLite file's user_version, a shared run's
`schema`."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS run (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment TEXT NOT NULL,
    cluster TEXT NOT NULL DEFAULT '',
    started_at TEXT NOT NULL,
    verdict TEXT NOT NULL,
    duration_s REAL NOT NULL,
    out_dir TEXT NOT NULL,
    metrics TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS run_by_experiment ON run (experiment, started_at);
CREATE INDEX IF NOT EXISTS run_by_cluster ON run (cluster, started_at);
CREATE TABLE IF NOT EXISTS metric (
    run_id INTEGER NOT NULL REFERENCES run (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    value REAL,
    PRIMARY KEY (run_id, name)
);
"""

# Concurrent runs (a nightly job next to a manual one) wait for each other's write this long.
_BUSY_TIMEOUT_S = 30.0


class StoreError(RsdrillError):
    """The history database cannot be opened, read or written."""


def flat_metrics(metrics: Metrics) -> dict[str, float | None]:
    """Every scalar metric by its SLO name, plus `recovery_s.max`; None when not measured."""
    from rsdrill.analysis.slo import observed_value
    from rsdrill.report.common import scalar_metrics

    flat: dict[str, float | None] = {
        name: None if value is None else float(value) for name, value in scalar_metrics(metrics)
    }
    flat["recovery_s.max"] = observed_value(metrics, "recovery_s.max")
    return flat


def record(result: Result, out_dir: Path, db: Path) -> int:
    """Append `result` (its reports in `out_dir`) to the history in `db`; returns the run's id.

    The file and its directory are created when missing. Raises StoreError.
    """
    started = _utc(dt.datetime.fromisoformat(result.started_at))
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        with closing(_connect(db)) as conn, conn:
            cursor = conn.execute(
                "INSERT INTO run (experiment, cluster, started_at, verdict, duration_s, out_dir,"
                " metrics) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    result.experiment,
                    result.target.cluster,
                    started.isoformat(timespec="microseconds"),
                    result.verdict,
                    result.duration_s,
                    str(out_dir.resolve()),
                    result.metrics.model_dump_json(),
                ),
            )
            run_id = cursor.lastrowid
            assert run_id is not None
            conn.executemany(
                "INSERT INTO metric (run_id, name, value) VALUES (?, ?, ?)",
                [(run_id, name, value) for name, value in flat_metrics(result.metrics).items()],
            )
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"{db}: {exc}") from exc
    return run_id


SHARED_SCHEMES = ("mongodb://", "mongodb+srv://")


def is_shared(location: str | Path) -> bool:
    """Whether the history is a shared MongoDB store rather than a SQLite file."""
    return str(location).startswith(SHARED_SCHEMES)


def _runs_collection(uri: str) -> tuple[Any, Collection[dict[str, Any]]]:
    from pymongo import ASCENDING, MongoClient
    from pymongo.uri_parser import parse_uri

    client: MongoClient[dict[str, Any]] = MongoClient(
        uri, serverSelectionTimeoutMS=5000, appname="rsdrill-history"
    )
    runs = client[parse_uri(uri)["database"] or "rsdrill"]["runs"]
    runs.create_index([("experiment", ASCENDING), ("started_at", ASCENDING)])
    runs.create_index([("cluster", ASCENDING), ("started_at", ASCENDING)])
    return client, runs


def record_shared(result: Result, out_dir: Path, uri: str) -> str:
    """Put `result` in a shared history in MongoDB (the URI's database, else `rsdrill`;
    collection `runs`, one document per run with its scalar metrics); returns its id. Keyed
    by the experiment and its start: recording a run again (`rsdrill history push`) replaces
    it, so each run is there once."""
    from pymongo.errors import PyMongoError

    from rsdrill.redact import redact_uri

    started = _utc(dt.datetime.fromisoformat(result.started_at))
    key = f"{result.experiment}@{started.isoformat(timespec='microseconds')}"
    if result.target.cluster:  # two clusters may start the same experiment at the same moment
        key += f" on {result.target.cluster}"
    doc = {
        "_id": key,
        "schema": SCHEMA_VERSION,
        "experiment": result.experiment,
        "cluster": result.target.cluster,
        "started_at": started.isoformat(timespec="microseconds"),
        "verdict": result.verdict,
        "duration_s": result.duration_s,
        "out_dir": str(out_dir.resolve()),
        "members": result.target.members,
        # Name/value pairs, as the SQLite metric rows: metric names have dots, which MongoDB
        # field names may not (FerretDB refuses them).
        "metrics": [{"name": n, "value": v} for n, v in flat_metrics(result.metrics).items()],
    }
    try:
        client, runs = _runs_collection(uri)
        with client:
            runs.replace_one({"_id": key}, doc, upsert=True)
    except (PyMongoError, ValueError) as exc:
        raise StoreError(f"{redact_uri(uri)}: {redact_uri(_problem(exc))}") from None
    return key


def _problem(exc: Exception) -> str:
    """pymongo's error as one line: a failed server selection's message goes on with the
    timeouts configured and the whole topology's description."""
    text = str(exc).split(", Timeout: ", 1)[0]
    return re.sub(r" \(configured timeouts: [^)]*\)", "", text)


def shared_history(
    uri: str,
    experiment: str | None = None,
    since: dt.datetime | dt.date | None = None,
    cluster: str | None = None,
) -> list[Run]:
    """As `history`, from a shared store; runs are numbered in the order returned."""
    from pymongo.errors import PyMongoError

    from rsdrill.redact import redact_uri

    query: dict[str, Any] = {}
    if experiment is not None:
        query["experiment"] = experiment
    if since is not None:
        query["started_at"] = {"$gte": _since(since)}
    if cluster is not None:
        # A schema-1 run has no cluster field: it is the unnamed cluster "", as in SQLite.
        query["cluster"] = cluster if cluster else {"$in": ["", None]}
    try:
        client, runs = _runs_collection(uri)
        with client:
            docs = list(runs.find(query).sort([("started_at", 1), ("_id", 1)]))
    except (PyMongoError, ValueError) as exc:
        raise StoreError(f"{redact_uri(uri)}: {redact_uri(_problem(exc))}") from None
    return [
        Run(
            id=n,
            experiment=doc["experiment"],
            started_at=dt.datetime.fromisoformat(doc["started_at"]),
            verdict=doc["verdict"],
            duration_s=doc["duration_s"],
            out_dir=Path(doc["out_dir"]),
            metrics={m["name"]: m["value"] for m in doc["metrics"]},
            cluster=doc.get("cluster", ""),
        )
        for n, doc in enumerate(docs, 1)
    ]


SQLITE_SCHEME = "sqlite:///"


def sqlite_path(location: str | Path) -> Path:
    """A SQLite history's file: a path, or a `sqlite:///relative` / `sqlite:////absolute` URL
    (as SQLAlchemy spells them)."""
    return Path(str(location).removeprefix(SQLITE_SCHEME))


def read(location: str, experiment: str | None = None, cluster: str | None = None) -> list[Run]:
    """The runs of the history at `location`: a shared store's URI or a SQLite file."""
    if is_shared(location):
        return shared_history(location, experiment, cluster=cluster)
    return history(sqlite_path(location), experiment, cluster=cluster)


def record_at(result: Result, out_dir: Path, location: str) -> None:
    """Record `result` in the history at `location` (see `read`). Raises StoreError."""
    if is_shared(location):
        record_shared(result, out_dir, location)
    else:
        record(result, out_dir, sqlite_path(location))


def _since(since: dt.datetime | dt.date) -> str:
    if not isinstance(since, dt.datetime):
        since = dt.datetime.combine(since, dt.time.min)
    return _utc(since).isoformat(timespec="microseconds")


def history(
    db: Path,
    experiment: str | None = None,
    since: dt.datetime | dt.date | None = None,
    cluster: str | None = None,
) -> list[Run]:
    """The runs recorded in `db`, oldest first; only `experiment`'s, only from `since` on,
    only `cluster`'s.

    `since` without a time zone (or a date, meaning its midnight) is read as UTC. A missing
    file holds no runs. Raises StoreError.
    """
    if not db.exists():
        return []
    where, params = [], []
    if experiment is not None:
        where.append("experiment = ?")
        params.append(experiment)
    if since is not None:
        where.append("started_at >= ?")
        params.append(_since(since))
    if cluster is not None:
        where.append("cluster = ?")
        params.append(cluster)
    sql = "SELECT id, experiment, cluster, started_at, verdict, duration_s, out_dir FROM run"
    if where:
        sql += " WHERE " + " AND ".join(where)
    try:
        with closing(_connect(db)) as conn:
            rows = conn.execute(sql + " ORDER BY started_at, id", params).fetchall()
            values: dict[int, dict[str, float | None]] = {row[0]: {} for row in rows}
            metric_sql = "SELECT run_id, name, value FROM metric"
            if where:
                metric_sql += f" WHERE run_id IN (SELECT id FROM run WHERE {' AND '.join(where)})"
            for run_id, name, value in conn.execute(metric_sql, params):
                values[run_id][name] = value
    except sqlite3.Error as exc:
        raise StoreError(f"{db}: {exc}") from exc
    return [
        Run(
            id=run_id,
            experiment=name,
            started_at=dt.datetime.fromisoformat(started),
            verdict=verdict,
            duration_s=duration,
            out_dir=Path(out_dir),
            metrics=values[run_id],
            cluster=cluster_of,
        )
        for run_id, name, cluster_of, started, verdict, duration, out_dir in rows
    ]


def baselines(
    runs: Iterable[Run],
    metric: str,
    k: float = 3.0,
    window: int = 10,
    min_history: int = MIN_HISTORY,
) -> dict[int, Baseline]:
    """The baseline each run's `metric` is judged against, by run id (runs oldest first).

    A run is judged when its verdict is pass or fail and it measured `metric`; its baseline is
    the values of the previous `window` such runs of the same experiment on the same cluster
    (the same experiment on another cluster is not the same workload), and it needs at least
    `min_history` of them (or `window`, if smaller). See the module docstring for the threshold.
    """
    past: dict[tuple[str, str], list[float]] = {}
    judged = {}
    for run in runs:
        value = run.metrics.get(metric)
        if run.verdict not in JUDGED_VERDICTS or value is None:
            continue
        values = past.setdefault((run.cluster, run.experiment), [])
        recent = values[-window:]
        if recent and len(recent) >= min(min_history, window):
            median = statistics.median(recent)
            mad = statistics.median(abs(v - median) for v in recent)
            spread = max(MAD_SCALE * mad, MAD_FLOOR_RELATIVE * abs(median), MAD_FLOOR_ABSOLUTE)
            judged[run.id] = Baseline(median, mad, median + k * spread, len(recent))
        values.append(value)
    return judged


def regressions(
    runs: Iterable[Run],
    metrics: Sequence[str] = KEY_METRICS,
    k: float = 3.0,
    window: int = 10,
    min_history: int = MIN_HISTORY,
) -> list[Regression]:
    """Each run's metrics that rose above their baseline (see `baselines`), in run order.

    `runs` must be oldest first, as `history` returns them.
    """
    runs = list(runs)
    judged = {m: baselines(runs, m, k, window, min_history) for m in metrics}
    found = []
    for run in runs:
        for metric in metrics:
            baseline = judged[metric].get(run.id)
            value = run.metrics.get(metric)
            if baseline is not None and value is not None and value > baseline.threshold:
                found.append(Regression(run, metric, value, baseline))
    return found


def _connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=_BUSY_TIMEOUT_S)
    conn.execute("PRAGMA foreign_keys = ON")
    if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
        _migrate(conn)
    return conn


def _migrate(conn: sqlite3.Connection) -> None:
    """Create the tables, or bring an older file's up to SCHEMA_VERSION. Under the write
    lock, and looked at again there: two runs opening an old file at once migrate it once."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(run)")}
            if columns and "cluster" not in columns:
                conn.execute("ALTER TABLE run ADD COLUMN cluster TEXT NOT NULL DEFAULT ''")
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def _utc(moment: dt.datetime) -> dt.datetime:
    """`moment` in UTC; a naive one is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)
