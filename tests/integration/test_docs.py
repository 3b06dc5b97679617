"""The docs are tested, so that a changed flag or field fails CI instead of a reader's first try.

Read from README.md and docs/**/*.md themselves (nothing is copied here):
- every shell command block runs as written, in order, in a fresh directory (with `experiments/`
  at hand), each command exiting 0; a command that cannot run here is listed in SKIPPED or
  SKIPPED_PROGRAMS with the reason, and an entry that matches nothing fails;
- every `rsdrill` command, in blocks and inline in the text, names a command that exists and
  only options that command has (a synopsis such as `rsdrill run FILE [--out DIR]` included);
- every YAML example of an rsdrill file (an experiment, a part of one, a timeline) loads through
  the schema, with dummy values for its `${VAR}`s, and its plan renders. A part of an experiment
  is read on top of the target the same page showed last (else a sandbox rs3).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from rsdrill.cli.app import app
from rsdrill.experiment.loader import load_document_text
from rsdrill.experiment.plan import render_plan
from rsdrill.experiment.schema import Experiment
from rsdrill.experiment.timeline import Timeline

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SHELL = ("sh", "bash", "shell")

# Programs a reader runs on their own machines, with why the suite does not.
SKIPPED_PROGRAMS = {
    "docker": "needs a Docker engine (none here); the image's install step is run by "
    "tests/integration/test_container_image.py",
    "kubectl": "needs a Kubernetes cluster; the manifests rsdrill renders for it are applied to "
    "a real kube-apiserver by tests/kubernetes/",
    "systemctl": "manages a host's own mongod service",
    "pip": "the suite runs from this very install (.ci/run made it)",
    ".ci/run": "the suite itself",
    ".ci/run-loaded": "the suite itself, beside a busy loop",
}
# rsdrill commands that name a reader's own hosts or paths: (page, start of the command) → why.
SKIPPED = {
    ("README.md", "rsdrill check staging.yaml"): "checks a staging cluster (its file is the YAML "
    "example above, loaded by test_yaml_example_loads)",
    ("README.md", "rsdrill run experiments/rs3-primary-kill.yaml --metrics-file "
     "/var/lib/node_exporter"): "node-exporter's textfile directory on a monitored host; the "
    "export is tested by tests/e2e/test_run_cli.py",
    ("README.md", "rsdrill run experiments/rs3-primary-kill.yaml --metrics-push "
     "http://pushgateway"): "a Pushgateway host; the push is tested against a real HTTP "
    "server by tests/unit/test_openmetrics.py",
    ("docs/storage-faults.md", "rsdrill faultfs mount /var/lib/mongodb"): "a host's mongod "
    "dbpath, with mongod stopped; mounting over a dbpath is tested by "
    "tests/integration/test_faultfs_cli.py",
    ("docs/storage-faults.md", "rsdrill faultfs status /var/lib/mongodb"): "the mount above",
}  # fmt: skip
# A synopsis names what the reader fills in: a capitalised placeholder, [optional], or `...`.
_PLACEHOLDER = re.compile(r"\[|\.\.\.|(?<![\w$/.-])[A-Z][A-Z_]*(?:\.yaml)?(?![\w=])")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    text: str

    @property
    def page(self) -> str:
        return self.path.relative_to(REPO).as_posix()

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(path, line, match.group(1), match.group(2)))
    return found


BLOCKS = _blocks()


def _commands(block: Block) -> list[tuple[int, str]]:
    """(line, command) of a shell block: comments dropped, a line ending in a backslash or one
    indented under a command (a synopsis's second line) joined to it."""
    found: list[tuple[int, str]] = []
    joined = False
    for n, raw in enumerate(block.text.splitlines(), block.line + 1):
        text = re.sub(r"(^|\s+)#.*$", "", raw).rstrip()
        if not text.strip():
            joined = False
            continue
        if found and (joined or raw[:1].isspace()):
            found[-1] = (found[-1][0], f"{found[-1][1]} {text.strip()}")
        else:
            found.append((n, text.strip()))
        joined = text.endswith("\\")
        if joined:
            found[-1] = (found[-1][0], found[-1][1][:-1].rstrip())
    return found


def _inline_commands() -> Iterator[tuple[str, str]]:
    """(page:line, command) of each `rsdrill ...` code span outside the blocks."""
    for path in DOCS:
        text = path.read_text()
        prose = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text,
                       flags=re.S | re.M)  # fmt: skip
        for match in re.finditer(r"`(rsdrill [^`]+)`", prose):
            line = prose.count("\n", 0, match.start()) + 1
            yield f"{path.relative_to(REPO).as_posix()}:{line}", match.group(1)


def _stages(command: str) -> list[str]:
    return [s.strip() for s in re.split(r"\s(?:&&|\|)\s", command)]


def _program(stage: str) -> str:
    words = shlex.split(stage)
    return words[0] if words else ""


def _skip_reason(page: str, stage: str) -> str | None:
    program = _program(stage)
    if program in SKIPPED_PROGRAMS:
        return SKIPPED_PROGRAMS[program]
    return next((why for (p, start), why in SKIPPED.items()
                 if p == page and stage.startswith(start)), None)  # fmt: skip


def _is_synopsis(stage: str) -> bool:
    return bool(_PLACEHOLDER.search(re.sub(r"'[^']*'|\"[^\"]*\"", "", stage)))


# -- every rsdrill command names options its command has -----------------------------------------


def _unknown_options(command: str) -> list[str]:
    """What in `command` (an rsdrill command line) its command does not have."""
    line = re.split(r"\s[|>]", command)[0]
    try:
        words = shlex.split(line)[1:]
    except ValueError:  # an apostrophe in prose
        words = line.split()[1:]
    # Typer's commands are click's (typer may carry its own copy of click: no isinstance).
    current: Any = typer.main.get_command(app)
    # A group's own options ([--db ...] of `rsdrill history`) end the subcommands as well.
    while words and hasattr(current, "get_command") and not words[0].startswith(("-", "[")):
        found = current.get_command(current.context_class(current), words[0])
        if found is None:
            return [f"no command {words[0]!r}"]
        current, words = found, words[1:]
    known = {"--help"}
    for param in current.params:
        known.update(param.opts, param.secondary_opts)
    options = [w.split("=", 1)[0] for w in words if w.startswith("-") and w != "-"]
    return [o for o in options if o not in known]


def _every_rsdrill_command() -> list[tuple[str, str]]:
    found = list(_inline_commands())
    for block in BLOCKS:
        if block.lang in SHELL:
            for line, command in _commands(block):
                for stage in _stages(command):
                    if _program(stage) == "rsdrill":
                        found.append((f"{block.page}:{line}", stage))
    return found


def test_every_rsdrill_command_in_the_docs_has_the_options_it_names() -> None:
    commands = _every_rsdrill_command()
    assert len(commands) > 40, commands  # the scan finds them (README alone has dozens)
    wrong = [f"{where}: `{command}`: {', '.join(problems)}" for where, command in commands
             if (problems := _unknown_options(command))]  # fmt: skip
    assert not wrong, "\n".join(wrong)


def test_the_option_check_can_fail() -> None:
    assert _unknown_options("rsdrill sandbox up --topolgy rs3") == ["--topolgy"]
    assert _unknown_options("rsdrill sandbox upp") == ["no command 'upp'"]
    assert _unknown_options("rsdrill run FILE [--out DIR] [--no-live]") == []


# -- every shell block runs ----------------------------------------------------------------------


SHELL_BLOCKS = [b for b in BLOCKS if b.lang in SHELL]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=str)
def test_shell_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    (tmp_path / "experiments").symlink_to(REPO / "experiments")
    # A user's home: the sandbox's default directory and rsdrill's own (journal, fleet) in it.
    env = {**os.environ, "HOME": str(tmp_path), "RSDRILL_HOME": str(tmp_path / ".rsdrill"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    ran, skipped = [], []
    try:
        for line, command in _commands(block):
            stages = _stages(command)
            reasons = [_skip_reason(block.page, s) for s in stages]
            synopsis = [s for s in stages if _program(s) == "rsdrill" and _is_synopsis(s)]
            if synopsis:
                skipped.append(f"{block.page}:{line}: a synopsis (options checked above)")
                continue
            # The stages that can run here: a pipe into kubectl runs its rsdrill part.
            runnable = [s for s, why in zip(stages, reasons, strict=True) if why is None]
            for stage, why in zip(stages, reasons, strict=True):
                if why is not None:
                    skipped.append(f"{block.page}:{line}: `{stage}`: {why}")
            if not runnable:
                continue
            script = " | ".join(runnable) if " | " in command else " && ".join(runnable)
            done = subprocess.run(["bash", "-o", "pipefail", "-c", script], cwd=tmp_path,
                                  env=env, capture_output=True, text=True,
                                  timeout=240)  # fmt: skip
            assert done.returncode == 0, (
                f"{block.page}:{line}: `{script}` exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
            ran.append(script)
    finally:
        if (tmp_path / ".rsdrill" / "sandbox").exists():
            subprocess.run(["rsdrill", "sandbox", "down"], cwd=tmp_path, env=env,
                           capture_output=True, timeout=60)  # fmt: skip
    print(f"{block}: ran {len(ran)}, skipped {len(skipped)}", *skipped, sep="\n  ")
    assert ran or skipped


def test_every_skip_entry_still_matches_a_command() -> None:
    stages = [(b.page, s) for b in SHELL_BLOCKS for _, c in _commands(b) for s in _stages(c)]
    stale = [key for key in SKIPPED
             if not any(p == key[0] and s.startswith(key[1]) for p, s in stages)]  # fmt: skip
    assert not stale, stale
    programs = {_program(s) for _, s in stages}
    assert not set(SKIPPED_PROGRAMS) - programs, set(SKIPPED_PROGRAMS) - programs


def test_the_main_job_and_the_sandbox_block_are_among_those_run() -> None:
    """The README's two set-up commands and its sandbox walk-through are not skipped."""
    readme = [b for b in SHELL_BLOCKS if b.page == "README.md"]
    commands = [c for b in readme for _, c in _commands(b)]
    assert any("rsdrill run experiments/rs3-primary-kill.yaml --out results" in c for c in commands)
    runnable = [s for c in commands for s in _stages(c)
                if _skip_reason("README.md", s) is None and not _is_synopsis(s)]  # fmt: skip
    assert "rsdrill sandbox kill primary" in runnable and "rsdrill sandbox down" in runnable


# -- every YAML example of an rsdrill file loads -------------------------------------------------

# Keys that make a YAML example an rsdrill file (or a part of one); `name` alone does not (a CI
# workflow has one).
_OWN_KEYS = (set(Experiment.model_fields) | set(Timeline.model_fields)) - {"name", "description"}
_BASE = {"name": "docs-example", "target": {"platform": "sandbox", "topology": "rs3"},
         "faults": [{"at": "5s", "kind": "stepdown"}]}  # fmt: skip


def _dummy_env(text: str) -> dict[str, str]:
    env = {}
    for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text):
        if name.endswith("URI"):
            env[name] = "mongodb://db1.example.com:27017,db2.example.com:27017/?replicaSet=rs0"
        else:
            env[name] = "https://hooks.example.com/x" if name.endswith("URL") else "dummy"
    return env


def _rsdrill_yaml() -> list[tuple[Block, Any]]:
    found = []
    for block in BLOCKS:
        if block.lang != "yaml":
            continue
        try:
            document = yaml.safe_load(block.text)
        except yaml.YAMLError:
            continue  # test_every_yaml_block_parses says where
        if isinstance(document, dict) and _OWN_KEYS & {str(k) for k in document}:
            found.append((block, document))
    return found


YAML_EXAMPLES = _rsdrill_yaml()


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "yaml"], ids=str)
def test_every_yaml_block_parses(block: Block) -> None:
    """Workflows and manifests too: a reader pastes them (a GitHub workflow here once had
    `${{ }}` unquoted in a flow mapping, which no YAML parser reads)."""
    yaml.safe_load(block.text)


def _page_target(block: Block) -> Any:
    """The target the page showed last before `block` (a sandbox rs3 when none)."""
    earlier = [d for b, d in YAML_EXAMPLES if b.path == block.path and b.line < block.line]
    return next((d["target"] for d in reversed(earlier) if "target" in d), _BASE["target"])


@pytest.mark.parametrize(
    ("block", "document"), YAML_EXAMPLES, ids=[str(b) for b, _ in YAML_EXAMPLES]
)
def test_yaml_example_loads(
    block: Block, document: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_probe_plugins(re.findall(r"\bplugin: ([\w-]+)", block.text), tmp_path, monkeypatch)
    if "events" in document:
        load_document_text(Timeline, block.text, str(block), _dummy_env(block.text))
        return
    text = block.text
    # A part: on top of the page's target, and a fault of its own if it has none (added as
    # lines above it: the part is read as written, `on:` keys and all).
    base = {**_BASE, "target": _page_target(block)}
    text = "".join(f"{key}: {json.dumps(value)}\n" for key, value in base.items()
                   if key not in document) + block.text  # fmt: skip
    env = _dummy_env(text)
    experiment = load_document_text(Experiment, text, str(block), env)
    assert render_plan(experiment)


def _install_probe_plugins(names: list[str], site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe plugins an example names, installed as the reader's own package would be."""
    if not names:
        return
    info = site / "docs_plugins-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: docs-plugins\nVersion: 0.1\n")
    points = "".join(f"{name} = docs_plugins:healthy\n" for name in names)
    (info / "entry_points.txt").write_text(f"[rsdrill.probes]\n{points}")
    monkeypatch.syspath_prepend(str(site))


def test_the_yaml_scan_finds_the_examples_and_leaves_out_ci_files() -> None:
    pages = {b.page for b, _ in YAML_EXAMPLES}
    assert {"README.md", "docs/platforms/ec2.md", "docs/storage-faults.md"} <= pages, pages
    names = {d.get("name") for _, d in YAML_EXAMPLES}
    assert "rs3-primary-kill" in names and "nightly chaos" not in names, names


# -- what the Python examples import is installed, or the page says how -------------------------

_DEPENDENCIES = {
    re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].lower().replace("-", "_")
    for requirement in tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "dependencies"
    ]
}


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "python"], ids=str)
def test_a_python_example_needs_only_what_pip_install_brings_or_the_page_names(
    block: Block,
) -> None:
    """`pip install -e .` brings rsdrill's dependencies; anything else an example imports is
    named with its `pip install` on the same page (the pytest section once did not say that
    pytest is the reader's to install)."""
    page = " ".join(block.path.read_text().split())
    imported = re.findall(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", block.text, re.M)
    missing = [
        name for name in imported
        if name not in sys.stdlib_module_names and name != "rsdrill"
        and name.lower() not in _DEPENDENCIES and f"pip install {name}" not in page
    ]  # fmt: skip
    assert not missing, f"{block}: imports {missing}: say `pip install ...` on the page"


def test_the_readmes_validate_command_covers_the_whole_catalog() -> None:
    """`rsdrill validate experiments/*.yaml` once left out experiments/seeds/: the README's own
    command must name every catalog file."""
    readme = [b for b in SHELL_BLOCKS if b.page == "README.md"]
    (command,) = [c for b in readme for _, c in _commands(b) if c.startswith("rsdrill validate ")]
    named = {p for pattern in shlex.split(command)[2:] for p in REPO.glob(pattern)}
    catalog = set((REPO / "experiments").rglob("*.yaml"))
    assert catalog and catalog <= named, sorted(str(p) for p in catalog - named)
