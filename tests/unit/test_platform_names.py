"""A platform's name is decided in its own package: shared code asks the registry what a
platform is (`member_source`: built by the run, listed in the file, discovered from its URI;
`on_this_machine`), never compares a platform to a name. Every exception is listed here, with
why it must stay."""

from __future__ import annotations

import ast
from pathlib import Path

import rsdrill
from rsdrill import registry
from tests.harness.source import parse

ROOT = Path(rsdrill.__file__).parent
NAMES = frozenset(registry.built_in())

ALLOWED: dict[str, tuple[set[str], str]] = {
    "cronjob.py": (
        {"kubernetes"},
        "a schedule is Kubernetes CronJobs whose pods run the experiments in the cluster with "
        "its service account: only kubernetes experiments can run there",
    ),
    "pytest_plugin.py": (
        {"sandbox", "local"},
        "--rsdrill-target's own syntax names them: `sandbox:rs3` sets a sandbox's topology, a URI "
        "replaces a local target's",
    ),
}


def platforms_compared(source: str) -> list[tuple[int, str]]:
    """(line, name) for each platform name compared to an expression that mentions a
    platform (`target.platform == "sandbox"`, `platform in ("sandbox", "local")`)."""
    found = []
    for node in ast.walk(parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any("platform" in ast.dump(side) for side in sides):
            continue
        constants = [c for side in sides
                     for c in ([side] if isinstance(side, ast.Constant) else
                               side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set))
                               else [])]  # fmt: skip
        found += [(c.lineno, c.value) for c in constants
                  if isinstance(c, ast.Constant) and c.value in NAMES]  # fmt: skip
    return sorted(set(found))


def _scanned() -> dict[str, list[tuple[int, str]]]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        parts = module.split("/")
        if parts[0] == "platforms" and len(parts) > 2:  # a platform's own package
            continue
        modules[module] = platforms_compared(path.read_text())
    return modules


def test_no_shared_module_compares_a_platform_to_its_name() -> None:
    unlisted = {
        module: named
        for module, named in _scanned().items()
        if named and not {name for _, name in named} <= ALLOWED.get(module, (set(), ""))[0]
    }
    assert not unlisted, f"ask rsdrill.registry what the platform is instead: {unlisted}"


def test_every_exception_is_still_needed() -> None:
    scanned = _scanned()
    stale = {m: names for m, (names, _) in ALLOWED.items()
             if not names <= {name for _, name in scanned.get(m, [])}}  # fmt: skip
    assert not stale, f"no longer compared there, drop from ALLOWED: {stale}"


def test_the_scan_finds_what_it_looks_for() -> None:
    found = platforms_compared(
        'if exp.target.platform == "sandbox": pass\n'
        'if platform not in ("sandbox", "local"): pass\n'
        'if getattr(t, "platform", None) == "ec2": pass\n'
        'if db == "local": pass\n'  # a database, not a platform
    )
    assert found == [(1, "sandbox"), (2, "local"), (2, "sandbox"), (3, "ec2")]
