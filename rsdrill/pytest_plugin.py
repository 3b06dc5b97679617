"""The pytest plugin (entry point `pytest11`): chaos experiments as tests, SLOs as assertions.

- The `rsdrill` fixture runs experiments from a test: `rsdrill.run(path_or_dict, **overrides)`
  returns a `RunResult` whose attributes are the metrics (`r.write_unavailable_s`,
  `r.latency_ms.p99`) and whose `assert_slo()` fails the test naming each failed SLO.
- `@pytest.mark.rsdrill("experiments/x.yaml", **overrides)` makes the experiment the test: it
  fails when an SLO fails or the run ends in error or aborted. The test's body runs after a
  passing run and can reach the result as `rsdrill.runs[0]`.
- A relative experiment path is looked up beside the test file, then under pytest's rootdir.
- Overrides are keyword arguments naming a field of the experiment file, `__` separating the
  levels: `target__election_timeout="1s"`, `faults__0__at="3s"`,
  `slo__write_unavailable_s="<= 5"` (a key may itself contain dots: `**{"slo__latency_ms.p99":
  "<= 50"}`), `slo={...}` replaces the whole mapping. Values are read as if written in the file.
- `--rsdrill-target` points the experiments elsewhere: a `mongodb://` URI replaces `target.uri`
  of `platform: local` experiments; `sandbox:rs1|rs3|psa` replaces the topology of sandbox ones.
  It applies after the overrides; an experiment of the other platform fails.
- `--rsdrill-out DIR`: each run's reports go to `DIR/<test name>` (default: under pytest's
  temporary directory).
- Each run's metrics, verdict and report path are JUnit properties (`rsdrill.write_unavailable_s`,
  ..., `rsdrill.report`; a test's second run is `rsdrill.2.*`); unmeasured metrics are `null`.

Nothing heavy is imported until a test uses rsdrill: pytest loads this module in every session.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment
    from rsdrill.result import Result

MARKER = "rsdrill"
TOPOLOGIES = ("rs1", "rs3", "psa")
SANDBOX_PREFIX = "sandbox:"
URI_PREFIXES = ("mongodb://", "mongodb+srv://")
OVERRIDE_SEPARATOR = "__"

_DRILL = pytest.StashKey["Drill"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rsdrill", "rsdrill chaos experiments")
    group.addoption(
        "--rsdrill-target",
        metavar="URI",
        help="Run the experiments against this target: a mongodb:// URI replaces target.uri "
        "of platform local experiments; sandbox:rs1|rs3|psa sets the topology of sandbox ones.",
    )
    group.addoption(
        "--rsdrill-out",
        metavar="DIR",
        type=Path,
        help="Write each run's reports to DIR/<test name> (default: pytest's temporary dir).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(experiment, **overrides): run the experiment file as this test; it fails "
        "when an SLO fails or the run ends in error or aborted.",
    )
    target = config.getoption("rsdrill_target")
    if target is not None and not _valid_target(target):
        raise pytest.UsageError(
            f"--rsdrill-target {target!r}: give a mongodb:// URI (platform local) or "
            f"sandbox:{'|'.join(TOPOLOGIES)}"
        )


@dataclass(frozen=True)
class RunResult:
    """One run of an experiment: its `result`, and its metrics as attributes.

    `r.write_unavailable_s`, `r.failover_parts.election_s`, `r.latency_ms.p99`, ... are the
    `Metrics` fields of `result.json`: None when not measured, except in a run that ended in
    error or aborted, where reading one fails the test with the run's error.
    """

    result: Result
    out_dir: Path

    @property
    def report_path(self) -> Path:
        """The run's HTML report."""
        return self.out_dir / "report.html"

    @property
    def verdict(self) -> str:
        """pass, fail, aborted or error."""
        return self.result.verdict

    def assert_slo(self) -> None:
        """Raise AssertionError unless the verdict is pass: each failed SLO with its threshold and
        observed value (or the run's error), and where the report is."""
        __tracebackhide__ = True  # pytest shows the test's line, not this one
        message = self.failure_message()
        if message is not None:
            raise AssertionError(message)

    def failure_message(self) -> str | None:
        """What `assert_slo` would say, or None when the verdict is pass."""
        from rsdrill.report.common import slo_condition, slo_observed, stall_line

        result = self.result
        if result.verdict == "pass":
            return None
        if result.verdict == "fail":
            failed = [s for s in result.slo if not s.passed]
            lines = [
                f"rsdrill experiment {result.experiment!r}: "
                f"{len(failed)} of {len(result.slo)} SLOs failed"
            ]
            for slo in failed:
                lines.append(f"  {slo.metric}: observed {slo_observed(slo)}, threshold "
                             f"{slo_condition(slo)}")  # fmt: skip
        else:
            lines = [
                f"rsdrill experiment {result.experiment!r} ended {result.verdict}: "
                f"{result.error or 'no error recorded'}"
            ]
        if (stalled := stall_line(result.metrics)) is not None:
            lines.append(stalled)
        lines.append(f"report: {self.report_path}")
        return "\n".join(lines)

    def __getattr__(self, name: str) -> Any:
        # Only for names the dataclass lacks; the guard keeps copy/pickle (which look up
        # dunders on a half-built object) from recursing.
        if name.startswith("_") or "result" not in self.__dict__:
            raise AttributeError(name)
        metrics = self.result.metrics
        if name not in type(metrics).model_fields:
            raise AttributeError(
                f"{type(self).__name__} has no attribute {name!r} (metrics: "
                f"{', '.join(type(metrics).model_fields)})"
            )
        value = getattr(metrics, name)
        if value is None and self.result.verdict in ("error", "aborted"):
            # `assert run.write_unavailable_s <= 15` said "TypeError: '<=' not supported
            # between instances of 'NoneType' and 'int'" when the sandbox could not start.
            __tracebackhide__ = True
            raise AssertionError(f"{name} not measured: {self.failure_message()}")
        return value

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *type(self.result.metrics).model_fields})


class Drill:
    """The `rsdrill` fixture: runs experiments for one test and keeps their results in `runs`."""

    def __init__(
        self,
        base_dir: Path,
        test_name: str,
        search_dirs: tuple[Path, ...],
        target: str | None,
        user_properties: list[tuple[str, object]],
    ) -> None:
        self._base_dir = base_dir
        self._search_dirs = search_dirs
        self._test_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name).strip("_") or "test"
        self._target = target
        self._properties = user_properties
        self.runs: list[RunResult] = []

    def run(self, experiment: str | Path | Mapping[str, Any], /, **overrides: Any) -> RunResult:
        """Run an experiment file (or a dict shaped like one) with `overrides` applied.

        A relative path is looked up beside the test file, then under pytest's rootdir. An
        experiment that does not validate, or a `--rsdrill-target` that does not fit it,
        fails the test. The run's own failures do not: see `RunResult.assert_slo`.
        """
        import rsdrill

        if not isinstance(experiment, Mapping):
            experiment = self._find(Path(experiment))
        loaded = self._load(experiment, overrides)
        out_dir = self._next_out_dir()
        result = rsdrill.run(loaded, out=out_dir)
        run = RunResult(result, out_dir)
        self.runs.append(run)
        self._record(run)
        return run

    def _find(self, path: Path) -> Path:
        candidates = [d / path for d in self._search_dirs if not path.is_absolute()]
        return next((c for c in candidates if c.exists()), path)

    def _load(self, experiment: Path | Mapping[str, Any], overrides: dict[str, Any]) -> Experiment:
        import yaml

        import rsdrill
        from rsdrill.experiment.loader import ExperimentError, load_experiment_text

        try:
            if not isinstance(experiment, Mapping) and not overrides and self._target is None:
                return rsdrill.load(experiment)  # errors point into the file itself
            if isinstance(experiment, Mapping):
                source, document = "<dict>", copy.deepcopy(dict(experiment))
            else:
                source = str(experiment)
                try:
                    document = yaml.safe_load(experiment.read_text(encoding="utf-8"))
                except (OSError, yaml.YAMLError):
                    return rsdrill.load(experiment)  # which says what is wrong
            for key, value in overrides.items():
                _set(document, key.split(OVERRIDE_SEPARATOR), value, key)
            if self._target is not None:
                _apply_target(document, self._target)
            # Validated as text so that problems read as they do for a file (with did-you-mean);
            # lines then count in this regenerated text.
            text = yaml.safe_dump(document, sort_keys=False)
            return load_experiment_text(text, f"{source} (with overrides)")
        except (ExperimentError, _OverrideError) as exc:
            pytest.fail(str(exc), pytrace=False)

    def _next_out_dir(self) -> Path:
        name = self._test_name if not self.runs else f"{self._test_name}-{len(self.runs) + 1}"
        out_dir, n = self._base_dir / name, 1
        while out_dir.exists():  # an earlier session's run in the same --rsdrill-out
            n += 1
            out_dir = self._base_dir / f"{name}.{n}"
        return out_dir

    def _record(self, run: RunResult) -> None:
        """The run's JUnit properties. Appended to the test's `user_properties` as
        `record_property` does, without its warning that the default xunit2 schema has no
        place for them: pytest writes them in every junit_family, and CI tools read them."""
        from rsdrill.store import flat_metrics

        prefix = "rsdrill." if len(self.runs) == 1 else f"rsdrill.{len(self.runs)}."
        self._properties.append((f"{prefix}verdict", run.verdict))
        for name, value in flat_metrics(run.result.metrics).items():
            self._properties.append((f"{prefix}{name}", "null" if value is None else value))
        self._properties.append((f"{prefix}report", str(run.report_path)))


class _OverrideError(Exception):
    """An override or --rsdrill-target that cannot be applied to the experiment."""


def _set(document: Any, path: list[str], value: Any, key: str) -> None:
    """Set `document[path[0]][path[1]]...` (list items by index), creating mappings as needed."""
    node = document
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise _OverrideError(f"override {key}: no item {part} in a list of {len(node)}")
            index: Any = int(part)
        elif isinstance(node, dict):
            index = part
            if not last and not isinstance(node.get(part), dict | list):
                node[part] = {}
        else:
            where = OVERRIDE_SEPARATOR.join(path[:i])
            raise _OverrideError(f"override {key}: {where} is not a mapping or a list")
        if last:
            node[index] = value
        else:
            node = node[index]


def _valid_target(target: str) -> bool:
    return target.startswith(URI_PREFIXES) or target.removeprefix(SANDBOX_PREFIX) in TOPOLOGIES


def _apply_target(document: Any, target: str) -> None:
    """Point the experiment document at `--rsdrill-target`."""
    section = document.get("target") if isinstance(document, dict) else None
    if not isinstance(section, dict):
        section = {}  # no target section: refused below, as its platform is none
    platform = section.get("platform")
    if target.startswith(SANDBOX_PREFIX):
        if platform != "sandbox":
            raise _OverrideError(
                f"--rsdrill-target {target}: sets a sandbox topology, but the experiment's "
                f"platform is {platform}"
            )
        section["topology"] = target.removeprefix(SANDBOX_PREFIX)
    else:
        if platform != "local":
            raise _OverrideError(
                f"--rsdrill-target: a URI replaces target.uri of platform local experiments, "
                f"but the experiment's platform is {platform} (use sandbox:rs1|rs3|psa)"
            )
        section["uri"] = target


@pytest.fixture(scope="session")
def _rsdrill_base_dir(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    out = pytestconfig.getoption("rsdrill_out")
    return Path(out) if out is not None else tmp_path_factory.mktemp("rsdrill")


@pytest.fixture
def rsdrill(request: pytest.FixtureRequest, _rsdrill_base_dir: Path) -> Drill:
    """Run rsdrill experiments from this test: `rsdrill.run(path_or_dict, **overrides)`."""
    return Drill(
        _rsdrill_base_dir,
        request.node.name,
        (request.node.path.parent, request.config.rootpath),
        request.config.getoption("rsdrill_target"),
        request.node.user_properties,
    )


@pytest.fixture(autouse=True)
def _rsdrill_marker(request: pytest.FixtureRequest) -> None:
    """A test marked `rsdrill` gets the fixture, for `pytest_runtest_call` to run it with."""
    if request.node.get_closest_marker(MARKER) is not None:
        request.node.stash[_DRILL] = request.getfixturevalue("rsdrill")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Run a marked test's experiment in the test's call phase, so that its failure is the
    test's failure (not a setup error); the test's own body runs after a passing run."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return
    if len(marker.args) != 1:
        pytest.fail(
            f"@pytest.mark.{MARKER} takes one experiment file (and keyword overrides)",
            pytrace=False,
        )
    run = item.stash[_DRILL].run(marker.args[0], **marker.kwargs)
    message = run.failure_message()
    if message is not None:
        pytest.fail(message, pytrace=False)
