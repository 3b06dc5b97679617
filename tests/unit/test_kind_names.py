"""Adding a fault kind is its module (rsdrill/faults/) and one injector per platform
that carries it out: no other module compares a fault's kind to a kind's name or lists kinds by
name. The platforms' own packages (their injectors, options checks and targets) and the modules
of the kinds done the same on every platform (a spec's `injector`) may; every other exception
is listed here, with why it must stay."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import rsdrill
from rsdrill import registry
from rsdrill.faults import KIND_NAMES
from tests.harness.source import parse

ROOT = Path(rsdrill.__file__).parent

ALLOWED: dict[str, tuple[set[str], str]] = {
    "analysis/disaster_recovery.py": (
        {"data-loss"},
        "analysis sits below the experiment model in the layers, so it cannot read the specs; "
        "the drill's RTO and RPO are measured from the data-loss fault the history recorded",
    ),
    "experiment/mongodlog.py": (
        {"host-kill", "stepdown"},
        "it writes an incident's faults from what mongod logged: a primary lost is a host-kill, "
        "a stepdown command a stepdown (and 'stepdown' is also one of its own log events)",
    ),
    "experiment/mongodlog_read.py": (
        {"stepdown"},
        "'stepdown' is one of the log events it reads (a replSetStepDown in mongod's log), "
        "not the fault kind",
    ),
    "experiment/random_schedule.py": (
        {"stepdown"},
        "a drawn stepdown goes to the primary unless its template says otherwise, with its "
        "catch-up cut to the drawn length: the random schedule's own rule, in its own terms",
    ),
}


def kinds_named(source: str) -> list[tuple[int, str]]:
    """(line, kind) for each kind's name compared to something, or listed in a tuple, list,
    set or dict's keys (a table of kinds by name)."""
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Compare):
            candidates = [node.left, *node.comparators]
            candidates += [e for c in candidates if isinstance(c, (ast.Tuple, ast.List, ast.Set))
                           for e in c.elts]  # fmt: skip
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            candidates = list(node.elts)
        elif isinstance(node, ast.Dict):
            candidates = [k for k in node.keys if k is not None]
        else:
            continue
        found += [(c.lineno, c.value) for c in candidates
                  if isinstance(c, ast.Constant) and c.value in KIND_NAMES]  # fmt: skip
    return sorted(set(found))


def _may_name_kinds(module: str) -> bool:
    """A kind's own module, or a platform's own package (`platforms/command/` is the one of
    the kinds done the same on every platform)."""
    parts = module.split("/")
    return parts[0] == "faults" or (parts[0] == "platforms" and len(parts) > 2)


def _scanned() -> dict[str, list[tuple[int, str]]]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if not _may_name_kinds(module):
            modules[module] = kinds_named(path.read_text())
    return modules


def test_the_scan_finds_kinds_compared_or_listed_by_name_and_nothing_else() -> None:
    source = (
        'if fault.kind == "host-kill": pass\n'
        'down = f.kind in ("stepdown", "clock-skew")\n'
        '_TOOLS = {"disk-fault": "fuse"}\n'
        '_NETWORK = ["network-degrade"]\n'
        'text = f"{fault.kind} is not host-freeze"\n'
        'log("volume-detach")\n'
    )
    assert kinds_named(source) == [(1, "host-kill"), (2, "clock-skew"), (2, "stepdown"),
                                   (3, "disk-fault"), (4, "network-degrade")]  # fmt: skip


def test_the_scan_covers_the_modules_that_used_to_name_kinds() -> None:
    scanned = _scanned()
    once_named = ("experiment/plan.py", "engine/guards.py", "engine/check.py",
                  "experiment/schema.py", "experiment/timeline.py")  # fmt: skip
    assert all(module in scanned for module in once_named)
    assert not _may_name_kinds("engine/runner.py")
    assert _may_name_kinds("platforms/ec2/injectors.py")
    assert _may_name_kinds("platforms/command/stepdown.py")
    assert not _may_name_kinds("platforms/base.py")


def test_no_module_outside_the_specs_and_the_platforms_names_a_kind() -> None:
    named = {module: found for module, found in _scanned().items() if found}
    unexpected = {
        module: [(line, kind) for line, kind in found
                 if kind not in ALLOWED.get(module, (set(), ""))[0]]
        for module, found in named.items()
    }  # fmt: skip
    assert {m: f for m, f in unexpected.items() if f} == {}, (
        "take what these need to know of a kind from its model or spec (rsdrill/faults/)"
    )
    # An exception no longer needed is removed from the list.
    for module, (kinds, _why) in ALLOWED.items():
        assert kinds == {kind for _, kind in named.get(module, [])}, module


@pytest.mark.parametrize("platform", registry.built_in())
def test_every_factory_in_a_platform_s_injectors_table_is_importable(platform: str) -> None:
    for kind, reference in registry.platform(platform).injectors.items():
        assert kind in KIND_NAMES
        module, _, name = reference.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), reference
