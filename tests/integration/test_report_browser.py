"""report.html in a real headless Chromium: the script runs, the timeline is drawn, pixels show it.

Chromium is the Debian package `chromium` (`/usr/bin/chromium`); `.ci/run` installs it. Without it
these tests FAIL rather than skip, so a CI machine cannot silently stop checking the report.
Set `RSDRILL_NO_BROWSER=1` to skip them deliberately (e.g. on a laptop without Chromium).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_sample import KILLED, MEMBERS, sample_ops, sample_result

from rsdrill.report import write_reports
from rsdrill.result import Stall

pytestmark = pytest.mark.skipif(
    os.environ.get("RSDRILL_NO_BROWSER") == "1", reason="RSDRILL_NO_BROWSER=1"
)

# Colors the chart must have painted (see rsdrill/report/assets.py), as RGB.
OK_GREEN, ERROR_RED, TIMEOUT_AMBER = (0x2E, 0x9E, 0x44), (0xD7, 0x26, 0x3D), (0xF0, 0xA2, 0x02)
PRIMARY_BLUE, DOWN_HATCH_DARK = (0x1D, 0x4E, 0x89), (0x2B, 0x0B, 0x0E)


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium offline with a throwaway profile; fail the test if it is missing."""
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail(
            "chromium is not installed: apt-get install chromium "
            "(or set RSDRILL_NO_BROWSER=1 to skip the browser tests)"
        )
    command = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


class TimelineElements(HTMLParser):
    """Collects (tag, attributes) of every element inside `<svg id="timeline">`, and the root's."""

    def __init__(self) -> None:
        super().__init__()
        self.root: dict[str, str | None] | None = None
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.ids: set[str] = set()
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.add(str(attributes["id"]))
        if self._depth:
            self.elements.append((tag, attributes))
            self._depth += 1
        elif tag == "svg" and attributes.get("id") == "timeline":
            self.root = attributes
            self._depth = 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # Self-closing tags do not nest; count them without changing depth.
        self.handle_starttag(tag, attrs)
        if self._depth > 1:
            self._depth -= 1

    def handle_endtag(self, tag: str) -> None:
        if self._depth:
            self._depth -= 1

    def having(self, cls: str) -> list[dict[str, str | None]]:
        return [attrs for _, attrs in self.elements if cls in (attrs.get("class") or "").split()]


def rendered_dom(html_path: Path, profile: Path) -> TimelineElements:
    dom = chromium(profile, "--dump-dom", html_path.as_uri()).stdout
    parsed = TimelineElements()
    parsed.feed(dom)
    return parsed


def _unfilter(kind: int, line: bytearray, prev: bytearray, bpp: int) -> None:
    """Undo PNG filter Sub (1), Average (3) or Paeth (4) on `line` in place."""
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 255
        elif kind == 3:
            line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        else:
            up, corner = prev[i], prev[i - bpp] if i >= bpp else 0
            guess = left + up - corner
            pa, pb, pc = abs(guess - left), abs(guess - up), abs(guess - corner)
            best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            line[i] = (line[i] + best) & 255


def png_rgb_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit RGB(A) non-interlaced PNG, as Chromium writes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, chunks = 8, []
    header = b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color in (2, 6) and interlace == 0, "unexpected PNG format"
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 2:  # most rows of a screenshot: no per-byte arithmetic on the left
            line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
        elif kind in (1, 3, 4):
            _unfilter(kind, line, prev, bpp)
        rows.append(b"".join(bytes(line[i : i + 3]) for i in range(0, stride, bpp)))
        prev = line
    return width, height, rows


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    return write_reports(out, sample_result(), sample_ops())["html"]


def test_chromium_draws_the_timeline(report: Path, tmp_path: Path) -> None:
    dom = rendered_dom(report, tmp_path / "profile")

    assert dom.root is not None, "no <svg id=timeline> in the rendered page"
    assert dom.root.get("data-rendered") == "true", "the chart script did not finish"

    (fault,) = dom.having("fault-span")
    assert (fault.get("data-kind"), fault.get("data-target")) == ("host-kill", KILLED)
    assert (fault.get("data-t0"), fault.get("data-t1")) == ("5", "20")

    assert [lane.get("data-member") for lane in dom.having("state-lane")] == MEMBERS
    states = {seg.get("data-state") for seg in dom.having("state-seg")}
    assert {"PRIMARY", "SECONDARY", "DOWN", "STARTUP2", "RECOVERING"} <= states

    strips = [strip.get("data-probe") for strip in dom.having("strip")]
    assert strips == ["write", "read", "ledger", "load"]
    outcomes = {run.get("data-outcome") for run in dom.having("strip-run")}
    assert outcomes == {"ok", "error", "timeout"}

    latency = [series.get("data-probe") for series in dom.having("latency-series")]
    assert latency == ["write", "read", "load"]
    assert any(tag == "path" for tag, _ in dom.elements)


def test_chromium_screenshot_shows_the_chart(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    chromium(
        tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,1000", report.as_uri()
    )
    width, height, rows = png_rgb_pixels(shot.read_bytes())
    assert (width, height) == (1400, 1000)

    colors: set[bytes] = set()
    for row in rows:
        colors.update(row[i : i + 3] for i in range(0, len(row), 3))
    assert len(colors) > 50, f"only {len(colors)} colors: the page looks blank"
    for rgb in (OK_GREEN, ERROR_RED, TIMEOUT_AMBER, PRIMARY_BLUE, DOWN_HATCH_DARK):
        assert bytes(rgb) in colors, f"no pixel of #{bytes(rgb).hex()}: a chart row is missing"


def test_chromium_runs_no_markup_from_a_hostile_name(tmp_path: Path) -> None:
    name = '<img id="injected" src="x"><script id="injected-script">document.title=1</script>'
    html_path = write_reports(tmp_path / "out", sample_result(experiment=name), sample_ops(500))[
        "html"
    ]
    dom = rendered_dom(html_path, tmp_path / "profile")
    assert dom.root is not None and dom.root.get("data-rendered") == "true"
    assert not {"injected", "injected-script"} & dom.ids


def test_chromium_draws_the_stalls_of_this_process(tmp_path: Path) -> None:
    result = sample_result()
    result.metrics.probe_stalls = [Stall(at_s=14.2, seconds=2.1), Stall(at_s=3.0, seconds=0.25)]
    html_path = write_reports(tmp_path / "out", result, sample_ops(500))["html"]
    dom = rendered_dom(html_path, tmp_path / "profile")
    assert dom.root is not None and dom.root.get("data-rendered") == "true"
    (lane,) = dom.having("stall-lane")
    assert lane.get("data-lane") == "this process"
    spans = [(s.get("data-t0"), s.get("data-t1")) for s in dom.having("stall-span")]
    assert spans == [("14.2", "16.3"), ("3", "3.25")]
    assert len(dom.having("stall-band")) == 2
    # None without a stall.
    plain_path = write_reports(tmp_path / "plain", sample_result(), sample_ops(500))["html"]
    plain = rendered_dom(plain_path, tmp_path / "profile2")
    assert plain.root is not None and not plain.having("stall-lane")


class LagTicks(HTMLParser):
    """(y, label) of each tick label of the lag panel (`<g class="lag">`) in a rendered DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks: list[tuple[float, str]] = []
        self._depth = 0  # inside the lag panel: elements open
        self._tick_y: float | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if self._depth:
            self._depth += 1
            if tag == "text" and attributes.get("class") == "tick":
                self._tick_y = float(attributes["y"] or "nan")
        elif tag == "g" and attributes.get("class") == "lag":
            self._depth = 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._depth:
            return  # self-closing: no text, no depth
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        if self._tick_y is not None:
            self.ticks.append((self._tick_y, data))
            self._tick_y = None

    def handle_endtag(self, tag: str) -> None:
        if self._depth:
            self._depth -= 1


@pytest.mark.parametrize("peak_s", [0.0004, 0.002, 2.4])
def test_chromium_labels_the_lag_axis_for_small_lags_too(tmp_path: Path, peak_s: float) -> None:
    """A lag of about 2 ms (or under one) gets labels as distinct as its ticks, each the value
    at its height, and an axis that fits the data: not 0.00 three times."""
    html_path = write_reports(
        tmp_path / "out", sample_result(), sample_ops(500, lag_peak_s=peak_s)
    )["html"]
    dom = chromium(tmp_path / "profile", "--dump-dom", html_path.as_uri()).stdout
    parsed = LagTicks()
    parsed.feed(dom)
    ticks = sorted(parsed.ticks, reverse=True)  # bottom (largest y) first
    assert len(ticks) == 3, parsed.ticks
    values = [float(label) for _, label in ticks]
    assert len(set(values)) == 3 and values == sorted(values), ticks
    assert values[0] == 0
    top = values[-1]
    assert peak_s <= top <= 3 * peak_s, f"axis to {top} for a peak of {peak_s}"
    (y0, _), (y1, _), (y2, _) = ticks
    # Linear: each label is the value at its grid line's height.
    assert (y0 - y1) / (y0 - y2) == pytest.approx(values[1] / top, abs=0.01)


class FleetDom(HTMLParser):
    """The fleet page's cluster rows (cluster -> status) and cells marked as regressions."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}
        self.regression_cells = 0
        self.trend_points: list[str] = []  # each point's class

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if "cluster-row" in cls:
            self.rows[str(a["data-cluster"])] = str(a["data-status"])
        self.regression_cells += tag == "td" and "regression" in cls
        if tag == "circle" and "point" in cls:
            self.trend_points.append(" ".join(cls))


def test_chromium_shows_the_fleet_page(tmp_path: Path) -> None:
    from history_sample import fleet_history
    from typer.testing import CliRunner

    from rsdrill.cli.app import app

    db = tmp_path / "history.sqlite"
    fleet_history(tmp_path, db)
    done = CliRunner().invoke(app, ["report", "fleet", "--db", str(db), "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    page = tmp_path / "fleet.html"

    dom = FleetDom()
    dom.feed(chromium(tmp_path / "profile", "--dump-dom", page.as_uri()).stdout)
    assert dom.rows == {"": "failing", "west-2": "regressed", "east-1": "ok"}
    assert dom.regression_cells == 2  # west-2's newest night: write_unavailable_s, failover_s
    assert len(dom.trend_points) == 36 * 5  # each run's five key metrics, in its cluster's chart
    assert dom.trend_points.count("point regression") == 2

    shot = tmp_path / "fleet.png"
    chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1300,600", page.as_uri())
    _, _, rows = png_rgb_pixels(shot.read_bytes())
    colors: set[bytes] = set()
    for row in rows:
        colors.update(row[i : i + 3] for i in range(0, len(row), 3))
    # The three status badges of the fleet table, as painted.
    for rgb in ((0xCF, 0x22, 0x2E), (0xBF, 0x87, 0x00), (0x1A, 0x7F, 0x37)):
        assert bytes(rgb) in colors, f"no pixel of #{bytes(rgb).hex()}: a status badge is missing"
