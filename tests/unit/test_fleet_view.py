"""The fleet view over the history: runs grouped by cluster, each experiment judged against its
own cluster's runs, `rsdrill history --cluster/--all-clusters`, `rsdrill report fleet`, and an
old history file brought up to the cluster column without losing a run."""

from __future__ import annotations

import datetime as dt
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest
from history_sample import fleet_history, make_result, on
from test_store import invoke

from rsdrill import store
from rsdrill.runs import cluster_name


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.sqlite"


def test_the_cluster_is_named_or_derived_from_what_was_found() -> None:
    assert cluster_name("eu", "ec2", "rs3", "rs0", ["b:1", "a:1"], built=False) == "eu"
    assert cluster_name(None, "sandbox", "rs3", "rs0", ["h:1"], built=True) == "sandbox/rs3"
    assert cluster_name(None, "ec2", "rs3", "rs0", ["b:1", "a:1"], built=False) == "rs0@a:1,b:1"
    assert cluster_name(None, "local", "standalone", None, ["a:1"], built=False) == "a:1"


def test_each_cluster_is_judged_against_its_own_runs(db: Path, tmp_path: Path) -> None:
    fleet_history(tmp_path, db)
    runs = store.history(db)
    found = store.regressions(runs, ["write_unavailable_s"])
    # west-2's steady 25 s nights are not regressions against east-1's 11 s; its 40 s night is.
    assert [(g.run.cluster, g.value) for g in found] == [("west-2", 40.0)]
    assert {r.cluster for r in store.history(db, cluster="west-2")} == {"west-2"}
    assert [r.experiment for r in store.history(db, cluster="")] == ["rs1-host-kill"]


def test_history_all_clusters_begins_with_the_fleet(db: Path, tmp_path: Path) -> None:
    fleet_history(tmp_path, db)
    code, out, err = invoke("history", "--db", str(db), "--all-clusters", "--fail-on-regression",
                            "--metric", "write_unavailable_s")  # fmt: skip
    assert code == 1 and "newest run regressed: rs3-primary-kill on west-2" in err
    lines = out.splitlines()
    assert lines[0].split() == ["cluster", "runs", "last", "run", "(UTC)", "last", "verdict",
                                "status", "newest", "regressed"]  # fmt: skip
    rows = {line.split()[0]: line for line in lines[1:4]}
    assert list(rows) == ["(unnamed)", "west-2", "east-1"]  # failing, regressed, ok
    assert "fail (rs1-host-kill)" in rows["(unnamed)"] and " failing " in rows["(unnamed)"]
    assert rows["east-1"].split()[1] == "20" and rows["east-1"].split()[-2:] == ["ok", "-"]
    assert rows["west-2"].rstrip().endswith("regressed  rs3-primary-kill: write_unavailable_s")
    assert "rs3-primary-kill on east-1: 20 runs" in out
    assert "rs3-primary-kill on west-2: 15 runs, 1 regression" in out
    # --cluster: one cluster's tables only; "(unnamed)" is how the tables name no cluster.
    code, out, _ = invoke("history", "--db", str(db), "--cluster", "east-1")
    assert code == 0 and "east-1" in out and "west-2" not in out and "rs1-host-kill" not in out
    code, out, _ = invoke("history", "--db", str(db), "--cluster", "(unnamed)")
    assert out.startswith("rs1-host-kill: 1 run\n")
    code, out, _ = invoke("history", "--db", str(db), "--cluster", "nowhere")
    assert (code, out.strip()) == (0, f"no runs recorded in {db} that match")


class FleetPage(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}  # cluster -> status
        self.sections: list[str] = []
        self.flagged: list[str] = []  # the metric of each cell marked as a regression
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "script":
            self.scripts += 1
        if "cluster-row" in cls:
            self.rows[str(a["data-cluster"])] = str(a["data-status"])
        if tag == "section":
            self.sections.append(str(a["data-cluster"]))
        if tag == "td" and "regression" in cls:
            self.flagged.append(str(a["data-metric"]))


def test_report_fleet_writes_one_page_with_every_cluster(db: Path, tmp_path: Path) -> None:
    fleet_history(tmp_path, db)
    out = tmp_path / "fleet"
    code, said, _ = invoke("report", "fleet", "--db", str(db), "--out", str(out), "--last", "5")
    assert code == 0, said
    assert said.strip().endswith(f"3 clusters, 36 runs: 1 failing, 1 regressed; {out}/fleet.html")
    text = (out / "fleet.html").read_text()
    page = FleetPage()
    page.feed(text)
    assert page.rows == {"": "failing", "east-1": "ok", "west-2": "regressed"}
    assert page.sections == ["", "west-2", "east-1"]  # failing, regressed, ok
    assert sorted(page.flagged) == ["failover_s", "write_unavailable_s"]  # west-2's 40 s night
    assert page.scripts == 0 and "://" not in text
    assert "(the last 5 of 20 runs, newest first)" in text
    # A history that cannot be read: exit 4, nothing written.
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not a database")
    code, _, err = invoke("report", "fleet", "--db", str(bad), "--out", str(tmp_path / "no"))
    assert code == 4 and "cannot read the history" in err and not (tmp_path / "no").exists()


def test_a_cluster_name_cannot_put_markup_in_the_page(db: Path, tmp_path: Path) -> None:
    hostile = '<script>alert(1)</script><img src="x" onerror="alert(2)">'
    store.record(on(hostile, make_result(0)), tmp_path / "run", db)
    invoke("report", "fleet", "--db", str(db), "--out", str(tmp_path / "fleet"))
    text = (tmp_path / "fleet" / "fleet.html").read_text()
    assert "<script" not in text and "<img" not in text
    page = FleetPage()
    page.feed(text)
    assert list(page.rows) == [hostile]


def test_an_old_history_file_gains_the_cluster_column_and_keeps_its_runs(
    db: Path, tmp_path: Path
) -> None:
    with sqlite3.connect(db) as conn:  # the shape before clusters, user_version 0
        conn.executescript("""
            CREATE TABLE run (id INTEGER PRIMARY KEY AUTOINCREMENT, experiment TEXT NOT NULL,
                started_at TEXT NOT NULL, verdict TEXT NOT NULL, duration_s REAL NOT NULL,
                out_dir TEXT NOT NULL, metrics TEXT NOT NULL);
            CREATE TABLE metric (run_id INTEGER NOT NULL REFERENCES run (id) ON DELETE CASCADE,
                name TEXT NOT NULL, value REAL, PRIMARY KEY (run_id, name));
            INSERT INTO run VALUES (1, 'old', '2024-04-30T02:00:00+00:00', 'pass', 40.0, '/x',
                '{}');
            INSERT INTO metric VALUES (1, 'write_unavailable_s', 10.5);
        """)
    store.record(on("east-1", make_result(0)), tmp_path / "run", db)
    runs = store.history(db)
    assert [(r.experiment, r.cluster) for r in runs] == [
        ("old", ""),
        ("rs3-primary-kill", "east-1"),
    ]
    assert runs[0].metrics == {"write_unavailable_s": 10.5}
    assert runs[0].started_at == dt.datetime(2024, 4, 30, 2, tzinfo=dt.UTC)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (store.SCHEMA_VERSION,)
