"""Broken experiment files, made from the shipped ones, given to `rsdrill validate`, `plan` and
`check` (in process, through typer's runner): each is refused with one `FILE:LINE:COL` line and
exit status 2, or accepted by both validate and plan; never a traceback or a pydantic dump.

The mutations are drawn with a fixed seed, so a failure names a case that fails again; the
cases that once found a defect are kept in REGRESSIONS and run on their own.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.testing
import yaml
from typer.main import get_command
from typer.testing import CliRunner, Result

from rsdrill.cli.app import app
from rsdrill.experiment.schema import Experiment

ROOT = Path(__file__).resolve().parents[2]
CATALOG = sorted((ROOT / "experiments").rglob("*.yaml"))
SEED = 20261126
# Structural mutations drawn per catalog file (its text mutations come on top).
PER_FILE = 6
# A variable no environment sets: a reference to it is a note for validate, an error for plan.
UNSET = "RSDRILL_FUZZ_UNSET_VARIABLE"
# The catalog's variables without a default, set so that plan reads every platform's files
# (unset, plan would refuse them all for that).
CATALOG_ENV = {
    "RSDRILL_URI": "mongodb://db1:27017,db2:27017,db3:27017/?replicaSet=rs0",
    "RSDRILL_EC2_URI": "mongodb://db1:27017,db2:27017,db3:27017/?replicaSet=rs0",
    "MONGO_PASSWORD": "secret",
    "VSPHERE_HOST": "vcenter.example",
    "VSPHERE_USER": "rsdrill",
}
# Far more than any command here should take, far less than an alias bomb expanded would.
SECONDS_PER_COMMAND = 5.0

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Case:
    """One mutated file: its name (the catalog file and the mutation), its bytes, and the field
    the mutation touched (None when it is not about one field)."""

    name: str
    data: bytes | None  # None: the path is a directory
    field: str | None = None

    def write(self, tmp: Path) -> Path:
        path = tmp / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', self.name)[:120]}.yaml"
        if self.data is None:
            path.mkdir()
        else:
            path.write_bytes(self.data)
        return path


# -- mutations -----------------------------------------------------------------------------------

WRONG_TYPES: dict[str, Any] = {
    "list": ["a", "b"],
    "mapping": {"a": 1},
    "text": "some words",
    "number": 12345,
    "null": None,
    "bool": True,
    "float": 1.5,
    "negative": -1,
    "huge-int": 10**400,
    "huge-float": 1e308,
    "empty-text": "",
    "deep": [[[[[[[[[[[[[[[[[[[[{"a": [[[[[[[[[[1]]]]]]]]]]}]]]]]]]]]]]]]]]]]]]],
}
BAD_DURATIONS = ["5", "-1s", "1e999s", "5 parsecs", "", "1e400", "5ss", "s", "-0.5", "nan", "inf"]
BAD_SLOS = ["<=", "== abc", "<= -", "", "<= 1e999", "=> 5", "<= 5 s", "~ 3", "<=5<=6"]
BAD_URIS = ["", " ", "not a uri", "mongodb://", "mongodb://:0", f"${{{UNSET}}}", "${", "${1X}",
            f"${{{UNSET}:-}}", "mongodb://h:99999/", "mongodb+srv://"]  # fmt: skip
UNKNOWN_KEY = "zz_fuzz_unknown"


def paths(node: Any, at: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every value's path in a document, the document itself first."""
    yield at, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from paths(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from paths(value, (*at, i))


def dotted(at: Path_) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at).lstrip(".")


def replaced(doc: Any, at: Path_, value: Any) -> Any:
    """A copy of `doc` with the value at `at` set to `value` (or removed, for REMOVE)."""
    if not at:
        return value
    head, rest = at[0], at[1:]
    if isinstance(doc, dict):
        out = dict(doc)
        inner = replaced(doc[head], rest, value)
        if inner is REMOVE:
            del out[head]
        else:
            out[head] = inner
        return out
    items = list(doc)
    inner = replaced(items[head], rest, value)  # type: ignore[index]
    if inner is REMOVE:
        del items[head]  # type: ignore[arg-type]
    else:
        items[head] = inner  # type: ignore[index]
    return items


REMOVE: Any = object()


def dump(doc: Any) -> bytes:
    # libyaml's dumper (and loader, in cases()): the pure-Python ones took 6 s of each xdist
    # worker's collection for the ~1500 structural cases.
    return yaml.dump(
        doc, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True, width=1000
    ).encode()


def is_duration(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"(\d+(\.\d+)?(ms|s|m|h))+", value) is not None


def structural(name: str, doc: dict[str, Any], rng: random.Random) -> Iterator[Case]:
    """Mutations of the parsed document: each changes one value, key or mapping."""
    every = list(paths(doc))[1:]
    mappings = [(at, v) for at, v in paths(doc) if isinstance(v, dict)]
    keyed = [(at, v) for at, v in every if isinstance(at[-1], str)]
    for at, _ in rng.sample(keyed, min(PER_FILE, len(keyed))):
        yield Case(f"{name}:delete:{dotted(at)}", dump(replaced(doc, at, REMOVE)), dotted(at))
        kind = rng.choice(sorted(WRONG_TYPES))
        yield Case(f"{name}:{kind}:{dotted(at)}", dump(replaced(doc, at, WRONG_TYPES[kind])),
                   dotted(at))  # fmt: skip
    for at, value in mappings:
        # An unknown key at every nesting level.
        field = dotted((*at, UNKNOWN_KEY))
        yield Case(f"{name}:unknown-key:{field}",
                   dump(replaced(doc, at, {**value, UNKNOWN_KEY: 1})), field)  # fmt: skip
    for at, value in every:
        if is_duration(value):
            bad = rng.choice(BAD_DURATIONS)
            yield Case(f"{name}:duration={bad!r}:{dotted(at)}", dump(replaced(doc, at, bad)),
                       dotted(at))  # fmt: skip
        elif at[:1] == ("slo",) and len(at) == 2:
            bad = rng.choice(BAD_SLOS)
            yield Case(f"{name}:slo={bad!r}:{dotted(at)}", dump(replaced(doc, at, bad)),
                       dotted(at))  # fmt: skip
        elif isinstance(value, str) and rng.random() < 0.15:
            ref = rng.choice([f"${{{UNSET}}}", "${", f"${{{UNSET}:-}}", "$${x}"])
            yield Case(f"{name}:env={ref}:{dotted(at)}", dump(replaced(doc, at, ref)),
                       dotted(at))  # fmt: skip
    if isinstance(doc.get("slo"), dict):
        yield Case(f"{name}:slo-unknown-metric",
                   dump(replaced(doc, ("slo",), {**doc["slo"], "no_such_metric_s": "<= 1"})),
                   "slo.no_such_metric_s")  # fmt: skip
    if isinstance(doc.get("target"), dict) and "uri" in doc["target"]:
        bad = rng.choice(BAD_URIS)
        yield Case(f"{name}:uri={bad!r}", dump(replaced(doc, ("target", "uri"), bad)),
                   "target.uri")  # fmt: skip


# Extension keys x-a ... x-i, anchored a ... i: 9**9 strings if the aliases were expanded.
BILLION_LAUGHS = 'x-a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"x-{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n"
    for i in range(8)
)


def bombs(name: str, text: str) -> Iterator[Case]:
    """Alias bombs: a billion-laughs document under `x-` keys (its anchors a to i), alone and
    with its last alias used where the schema looks into it."""
    laughs = BILLION_LAUGHS
    yield Case(f"{name}:billion-laughs-extension", (laughs + text).encode())
    for field in ("faults", "steps", "description", "notify", "abort_on", "name", "slo"):
        body = re.sub(rf"(?m)^{field}:.*\n(?:[ -].*\n|#.*\n)*", "", text)
        yield Case(f"{name}:billion-laughs-{field}", (laughs + body + f"{field}: *i\n").encode())
    # The probes' own section moves under an extension key: `checks` is a mapping of models.
    checks = text.replace("\nprobes:", "\nprobes:\n  checks: {a: *i}\nx-probes:", 1)
    yield Case(f"{name}:billion-laughs-probes-checks", (laughs + checks).encode())


def textual(name: str, text: str, rng: random.Random) -> Iterator[Case]:
    """Mutations of the file's text: syntax, encoding, whole-file shapes."""
    lines = text.splitlines(True)
    body = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
    i = rng.choice(body)

    def line_made(new: str) -> bytes:
        return "".join([*lines[:i], new, *lines[i + 1 :]]).encode()

    yield Case(f"{name}:tab-indent@{i + 1}", line_made("\t" + lines[i].lstrip(" ")))
    yield Case(f"{name}:unclosed-flow@{i + 1}", line_made(lines[i].rstrip("\n") + " [\n"))
    yield Case(f"{name}:stray-colon@{i + 1}", line_made(lines[i].rstrip("\n") + ": : x\n"))
    yield Case(f"{name}:bad-indent@{i + 1}", line_made("   " + lines[i]))
    yield Case(f"{name}:duplicate-line@{i + 1}", line_made(lines[i] + lines[i]))
    top = [j for j in body if not lines[j].startswith((" ", "-"))]
    j = rng.choice(top)
    duplicate = text + lines[j].split(":")[0] + ": 1\n"
    yield Case(f"{name}:duplicate-top-key@{j + 1}", duplicate.encode())
    raw = text.encode()
    k = rng.randrange(len(raw))
    yield Case(f"{name}:latin1-byte@{k}", raw[:k] + b"\xe9" + raw[k:])
    yield Case(f"{name}:nul-byte@{k}", raw[:k] + b"\0" + raw[k:])
    yield Case(f"{name}:control-char@{k}", raw[:k] + b"\x07" + raw[k:])
    yield Case(f"{name}:truncated@{k}", raw[:k])
    yield Case(f"{name}:crlf", text.replace("\n", "\r\n").encode())
    yield Case(f"{name}:bom", b"\xef\xbb\xbf" + raw)
    yield Case(f"{name}:two-documents", (text + "---\n" + text).encode())
    unsafe = text.replace("name:", "name: !!python/object:os.system", 1)
    yield Case(f"{name}:unknown-tag", unsafe.encode())
    recursive = text.replace("name:", "x-r: &r [*r]\nname:", 1)
    yield Case(f"{name}:recursive-alias", recursive.encode())
    if rng.random() < 0.25:
        yield from bombs(name, text)


WHOLE_FILES: list[Case] = [
    Case("empty", b""),
    Case("only-whitespace", b"   \n\n  \n"),
    Case("only-comment", b"# nothing here\n"),
    Case("only-scalar", b"hello\n"),
    Case("only-number", b"42\n"),
    Case("only-null", b"null\n"),
    Case("only-list", b"- a\n- b\n"),
    Case("only-document-marker", b"---\n"),
    Case("quoted-empty", b"''\n"),
    Case("directory", None),
    Case("huge-integer-top", b"name: x\nfaults: " + b"9" * 5000 + b"\n"),
    Case("deep-flow-list", b"name: x\nfaults: " + b"[" * 5000 + b"]" * 5000 + b"\n"),
    Case("deep-flow-map", b"name: x\nfaults: " + b"{a: " * 3000 + b"1" + b"}" * 3000 + b"\n"),
    Case(
        "deep-block",
        b"name: x\nfaults:\n" + b"".join(b" " * (i + 1) + b"- \n" for i in range(2000)),
    ),
    Case("non-text-key", b"? [a, b]\n: 1\nname: x\n"),
    Case("null-key", b"~: 1\nname: x\n"),
    Case("int-key", b"1: 1\nname: x\n"),
    Case("bad-date", b"name: 2024-13-45\n"),
    Case("binary-tag", b"name: !!binary aGVsbG8=\n"),
    Case("long-line", b"name: " + b"a" * 200_000 + b"\n"),
    Case("utf16", "name: x\n".encode("utf-16")),
]


def cases() -> list[Case]:
    rng = random.Random(SEED)
    out: list[Case] = []
    for path in CATALOG:
        name = path.relative_to(ROOT / "experiments").as_posix()
        text = path.read_text()
        doc = yaml.load(text, Loader=yaml.CSafeLoader)
        out.extend(structural(name, doc, rng))
        out.extend(textual(name, text, rng))
    return out + WHOLE_FILES


# -- the oracle ----------------------------------------------------------------------------------

# What a message must never look like: a traceback, an exception's repr, pydantic's own dump.
NOT_A_MESSAGE = re.compile(
    r"Traceback|Error\(|Exception\(|<class |object at 0x|validation errors? for |"
    r"input_value=|input_type=|errors\.pydantic\.dev|Value error, |\[type="
)


def invoke(*args: str) -> Result:
    started = time.monotonic()
    result = CliRunner().invoke(app, list(args), env={UNSET: None, **CATALOG_ENV})
    elapsed = time.monotonic() - started
    assert elapsed < SECONDS_PER_COMMAND, f"rsdrill {' '.join(args)} took {elapsed:.1f} s"
    return result


def located(line: str, path: Path, nlines: int) -> re.Match[str]:
    """`line` as one FILE:LINE:COL message about `path`, within the file's lines."""
    match = re.match(rf"{re.escape(str(path))}:(\d+):(\d+): (.+)$", line)
    assert match, f"not FILE:LINE:COL: {line!r}"
    assert 1 <= int(match.group(1)) <= nlines + 1, line
    assert NOT_A_MESSAGE.search(line) is None, line
    assert len(line) < 1000, f"not one readable message ({len(line)} characters): {line[:300]}"
    return match


def refusal(result: Result, path: Path, nlines: int) -> str:
    """The one located line of a refusal (exit 2, nothing on stdout)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1, result.stderr
    located(lines[0], path, nlines)
    return lines[0]


def check_case(case: Case, tmp: Path) -> str | None:
    """Run validate, validate --strict, plan (and check, on a sandbox) on the case's file and
    hold their answers to the rule; returns validate's refusal, or None if it accepted it."""
    path = case.write(tmp)
    nlines = 1 if case.data is None else case.data.count(b"\n") + 1
    validated = invoke("validate", str(path))
    assert NOT_A_MESSAGE.search(validated.output) is None, validated.output
    strict = invoke("validate", "--strict", str(path))
    planned = invoke("plan", str(path))
    message = None
    if validated.exit_code == 0:
        assert validated.stdout == f"{path}: ok\n", validated.output
        for note in validated.stderr.splitlines():
            located(note.removeprefix("note: "), path, nlines)
    else:
        message = refusal(validated, path, nlines)
        # An invalid file is invalid with its environment too: for the same reason, unless a
        # variable it needs is unset (a note without --strict), which --strict names first.
        if "is not set" not in refusal(strict, path, nlines):
            assert strict.stderr == validated.stderr, (strict.stderr, message)
        if case.field is not None:
            # A mutation of one field is reported at a field (that one, or the one a check
            # across fields names), whose first part is one of the file's.
            field = located(message, path, nlines).group(3).split(": ")[0]
            if UNKNOWN_KEY in case.field:
                assert field == case.field, message
            else:
                assert re.split(r"[.\[]", field)[0] in Experiment.model_fields, message
    if strict.exit_code == 0:
        assert planned.exit_code == 0, ("plan refused what validate --strict accepts",
                                        planned.output)  # fmt: skip
        assert NOT_A_MESSAGE.search(planned.output) is None, planned.output
    else:
        assert refusal(planned, path, nlines) == refusal(strict, path, nlines), planned.stderr
    if strict.exit_code == 0 and case.data is not None and b"platform: sandbox" in case.data:
        checked = invoke("check", str(path))
        assert checked.exit_code in (0, 2), checked.output
        assert NOT_A_MESSAGE.search(checked.output) is None, checked.output
    return message


def edited(catalog: str, old: str, new: str) -> bytes:
    text = (ROOT / "experiments" / catalog).read_text()
    assert old in text, (catalog, old)
    return text.replace(old, new, 1).encode()


# Each mutation that found a defect, with the message it gets now (a part of it).
BIG = "1" + "0" * 400
REGRESSIONS: list[tuple[Case, str]] = [
    # OverflowError out of validate, plan and check (a traceback, exit 1).
    # (Since a file's duration needs its unit, it is refused for that, in one line.)
    (Case("duration-huge-int", edited("rs3-primary-kill.yaml", "at: 5s", f"at: {BIG}")),
     "faults[0].at: 1000000000000000000000000000000000000000...000000000000 (401 characters) "
     "has no unit"),
    # KeyError, TypeError and OverflowError out of a random schedule's template.
    (Case("random-template-without-kind",
          edited("soak-rs3.yaml", "kinds: [stepdown,", "kinds: [{select: primary},")),
     "faults.random.kinds[0]: a template needs `kind`"),
    (Case("random-catch-up-list", edited("soak-rs3.yaml", "kinds: [stepdown,",
                                         "kinds: [{kind: stepdown, secondary_catch_up: [1]},")),
     "faults.random.kinds[0].secondary_catch_up: as a drawn fault: [1] is not a duration"),
    (Case("random-catch-up-huge-int",
          edited("soak-rs3.yaml", "kinds: [stepdown,",
                 f"kinds: [{{kind: stepdown, secondary_catch_up: {BIG}}},")),
     "faults.random.kinds[0].secondary_catch_up: as a drawn fault: too large for a duration"),
    # pydantic's own words: "Value error, ...", "Extra inputs are not permitted".
    (Case("random-start-words", edited("soak-rs3.yaml", "start: 1s", "start: 5 parsecs")),
     "faults.random.start: '5 parsecs' is not a duration"),
    (Case("random-template-unknown-key",
          edited("soak-rs3.yaml", "kinds: [stepdown,", "kinds: [{kind: stepdown, zz: 1},")),
     "faults.random.kinds[0].zz: as a drawn fault: unknown key"),
    # Blamed on the first matrix value, with "Value error, " in it.
    (Case("matrix-with-probe-off",
          edited("recovery-keep-vs-wipe.yaml", "recovery: {interval: 50ms}", "recovery: null")),
     "slo.recovery_s.max: measured by the recovery probe"),
    # 5 KB messages quoting the whole value.
    (Case("huge-int-text", b"name: x\nfaults: " + b"9" * 5000 + b"\n"),
     "faults: a whole number of 5000 characters is too large"),
    (Case("huge-int-slo", edited("rs3-primary-kill.yaml", '"== 0"', BIG)),
     "slo.lost_acknowledged_writes: 1000000000000000000000000000000000000000...000000000000 "
     "(401 characters) is not a condition"),
    # pydantic's "Input should be a valid dictionary or object to extract fields from".
    (Case("alias-bomb-as-faults", edited("rs3-primary-kill.yaml", "faults:\n  - at: 5s",
                                         f"{BILLION_LAUGHS}faults:\n  - *i\n"
                                         "x-faults:\n  - at: 5s")),
     "faults[0]: expected a mapping, not a list"),
    # Accepted beside the faults; `--seed` then drew a schedule in their place.
    (Case("drawn-spec-in-file", edited("rs3-primary-kill.yaml", "observe:",
                                       "random_faults: {kinds: [stepdown]}\nobserve:")),
     "random_faults: not a key of a file"),
    # "faults: expected a list, not a mapping" for a key beside `random`.
    (Case("random-beside-key", edited("soak-rs3.yaml", "    duration: [1s, 2.5s]",
                                     "    duration: [1s, 2.5s]\n  zz: 1")),
     "faults.zz: unknown key"),
    # Valid or not by the seed validate drew: only the first role was checked.
    (Case("random-select-unknown-role", edited("soak-rs3.yaml", "    count: 2",
                                               "    count: 2\n    select: [primary, nobody]")),
     "faults.random.select[1]: Input should be 'primary', 'secondary' or 'arbiter'"),
    # Valid or not by the seed validate drew: only the drawn faults met the topology.
    (Case("random-role-the-topology-lacks",
          edited("soak-rs3.yaml", "topology: rs3,", "topology: rs1,").replace(
              b"    count: 2", b"    count: 2\n    select: [primary, secondary]")),
     "faults.random.select[1]: drawn for the secondary: select secondary, but rs1 has no"),
    # /dev/zero was read until memory ran out; a file past the limit stands for it here, so
    # that a regression fails instead of eating the machine's memory.
    (Case("past-the-size-limit", b"name: x\n" + b"#" * (17 * 2**20)),
     "larger than 16 MiB: not an experiment file"),
    (Case("slo-a-list", edited("rs3-primary-kill.yaml", "slo:\n", "slo: [<= 5]\nx-slo:\n")),
     "slo: expected a mapping, not a list"),
]  # fmt: skip

CASES = cases()


@pytest.fixture(autouse=True)
def command_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """typer's runner builds the command line anew for every call (80 ms, most of the fuzz's
    time); it is the same command each time."""
    command = get_command(app)
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: command)


@pytest.mark.parametrize(("case", "expected"), REGRESSIONS, ids=[c.name for c, _ in REGRESSIONS])
def test_a_mutation_that_found_a_defect(case: Case, expected: str, tmp_path: Path) -> None:
    message = check_case(case, tmp_path)
    assert message is not None and expected in message, message


def test_the_fuzz_covers_every_catalog_file_and_mutation() -> None:
    assert len(CATALOG) >= 40
    names = {case.name.split(":")[1] if ":" in case.name else case.name for case in CASES}
    for mutation in ("delete", "unknown-key", "billion-laughs-faults", "directory", "empty",
                     "only-list", "deep-block"):  # fmt: skip
        assert mutation in names
    assert any(name.startswith(("tab-indent", "latin1-byte")) for name in names)
    assert 1000 < len(CASES) < 3000


def fuzz(cases: list[Case], tmp_path: Path) -> None:
    """Every case through check_case; fails listing each case that broke the rule."""
    failures: list[str] = []
    for i, case in enumerate(cases):
        where = tmp_path / str(i)
        where.mkdir()
        try:
            check_case(case, where)
        except AssertionError as exc:
            failures.append(f"{case.name}: {str(exc).splitlines()[0][:300]}")
    assert failures == [], f"{len(failures)} of {len(cases)}:\n" + "\n".join(failures)


# Half the cases here, the other half in test_bad_input_fuzz_2.py: about 100 s in all, which
# two xdist workers share.
def test_fuzzed_files_are_refused_in_one_located_line(tmp_path: Path) -> None:
    fuzz(CASES[0::2], tmp_path)
