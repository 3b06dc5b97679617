"""Seeded random schedules: the same seed draws the same faults, `--seed` replays them, and the
drawn faults are valid, ordered and never overlap."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.engine.outcome import random_schedule
from rsdrill.experiment.loader import ExperimentError, load_experiment_text

TEXT = """\
name: random
target: {platform: sandbox, topology: rs3}
faults:
  random:
    seed: %s
    kinds: [stepdown, host-kill, host-freeze, network-partition,
            {kind: mongodb-fail-command, commands: [find], error_code: 6}]
    count: 5
    within: 30s
    duration: [1s, 4s]
"""


def _schedule(seed: int) -> list[tuple[float, str, object, float | None]]:
    exp = load_experiment_text(TEXT % seed, "exp.yaml", {})
    return [(f.at, f.kind, f.select, f.duration) for f in exp.faults]


def test_the_same_seed_draws_the_same_schedule() -> None:
    assert _schedule(11) == _schedule(11)
    # Different seeds give different schedules (for these two, checked once by hand).
    assert _schedule(11) != _schedule(12)


def test_drawn_faults_are_in_order_within_bounds_and_do_not_overlap() -> None:
    for seed in range(40):
        faults = load_experiment_text(TEXT % seed, "exp.yaml", {}).faults
        assert len(faults) == 5
        for fault in faults:
            assert fault.duration is not None and 0.1 <= fault.duration <= 4.0
            assert fault.at >= 2.0 and fault.at + fault.duration <= 32.0
        for before, after in itertools.pairwise(faults):
            assert before.duration is not None
            assert before.at + before.duration < after.at


def test_with_seed_replays_what_that_seed_drew_and_the_result_records_it() -> None:
    exp = load_experiment_text(TEXT % 3, "exp.yaml", {})
    replay = load_experiment_text(TEXT % 99, "exp.yaml", {}).with_seed(3)
    assert replay.faults == exp.faults
    recorded = random_schedule(replay)
    assert recorded is not None and recorded["seed"] == 3
    assert [f["kind"] for f in recorded["faults"]] == [f.kind for f in exp.faults]


def test_a_file_without_a_seed_gets_one_recorded() -> None:
    exp = load_experiment_text(TEXT.replace("    seed: %s\n", ""), "exp.yaml", {})
    assert exp.random_faults is not None and exp.random_faults.seed is not None
    assert exp.with_seed(exp.random_faults.seed).faults == exp.faults


def test_plan_prints_the_seed_and_the_drawn_schedule(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(TEXT % 5)
    out = CliRunner().invoke(app, ["plan", str(path), "--seed", "8"])
    assert out.exit_code == 0, out.output
    assert "random schedule: seed 8 (replay: rsdrill run FILE --seed 8)" in out.output
    drawn = load_experiment_text(TEXT % 8, "exp.yaml", {}).faults
    assert out.output.count("inject") == len(drawn)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("    count: 5\n", "    count: 0\n"),
        ("[1s, 4s]", "[4s, 1s]"),
        ("stepdown,", "data-loss,"),
        ("error_code: 6}", "}"),
    ],
)
def test_a_bad_random_spec_is_refused_at_its_line(change: str, message: str) -> None:
    with pytest.raises(ExperimentError) as info:
        load_experiment_text((TEXT % 1).replace(change, message), "exp.yaml", {})
    assert info.value.field.startswith("faults.random")


@pytest.mark.parametrize(
    ("change", "where", "message"),
    [
        # These raised KeyError, TypeError and OverflowError out of the loader (a traceback).
        ("stepdown,", "faults.random.kinds[0]", "a template needs `kind`"),
        ("stepdown,", "faults.random.kinds[0].secondary_catch_up",
         "as a drawn fault: [1] is not a duration"),
        ("stepdown,", "faults.random.kinds[0].secondary_catch_up",
         "as a drawn fault: too large for a duration"),
        # pydantic's own words were passed on ("Value error, ...", "Extra inputs are not
        # permitted" without the key, a union's tag in the field).
        ("stepdown,", "faults.random.kinds[0].zz", "as a drawn fault: unknown key"),
        # A selection with a stray key is the selection it fits best, not a misspelt role.
        ("stepdown,", "faults.random.kinds[0].select.zz", "as a drawn fault: unknown key"),
        ("    count: 5\n", "faults.random.zz", "unknown key"),
        ("within: 30s", "faults.random.within", "'5 parsecs' is not a duration like"),
        ("[1s, 4s]", "faults.random.duration[1]", "'x' is not a duration like"),
    ],
    ids=["no-kind", "catch-up-list", "catch-up-huge", "template-unknown-key",
         "template-select-unknown-key", "unknown-key", "within-words", "duration-item"],
)  # fmt: skip
def test_a_bad_random_spec_is_one_worded_problem_at_its_field(
    change: str, where: str, message: str
) -> None:
    replacement = {
        "faults.random.kinds[0]": "{select: primary},",
        "faults.random.kinds[0].secondary_catch_up": "{kind: stepdown, secondary_catch_up: "
        + ("[1]" if "[1]" in message else "1" + "0" * 400)
        + "},",
        "faults.random.kinds[0].zz": "{kind: stepdown, zz: 1},",
        "faults.random.kinds[0].select.zz": "{kind: host-kill, select: {count: 1, zz: 1}},",
        "faults.random.zz": "    count: 5\n    zz: 1\n",
        "faults.random.within": "within: 5 parsecs",
        "faults.random.duration[1]": "[1s, x]",
    }[where]
    with pytest.raises(ExperimentError) as info:
        load_experiment_text((TEXT % 1).replace(change, replacement), "exp.yaml", {})
    assert info.value.field == where
    assert info.value.problem.startswith(message), info.value.problem


def test_a_template_may_give_its_catch_up_as_a_duration() -> None:
    text = (TEXT % 1).replace("stepdown,", "{kind: stepdown, secondary_catch_up: 500ms},")
    assert load_experiment_text(text, "exp.yaml", {}).faults


def test_a_file_may_not_give_the_drawn_spec_itself() -> None:
    # It was accepted beside a list of faults, offered in "allowed:", and `--seed` then drew a
    # schedule in place of the file's faults.
    text = "name: x\ntarget: {platform: sandbox}\nfaults: [{at: 1s, kind: stepdown}]\n"
    with pytest.raises(ExperimentError) as info:
        load_experiment_text(text + "random_faults: {kinds: [stepdown]}\n", "exp.yaml", {})
    assert (info.value.line, info.value.field) == (4, "random_faults")
    with pytest.raises(ExperimentError) as info:
        load_experiment_text(text + "randm: 1\n", "exp.yaml", {})
    assert "random_faults" not in info.value.problem


def test_a_key_beside_random_is_named() -> None:
    with pytest.raises(ExperimentError) as info:
        load_experiment_text(TEXT % 1 + "  seed: 3\n", "exp.yaml", {})
    assert (info.value.line, info.value.field) == (11, "faults.seed")
    assert info.value.problem.startswith("unknown key")


def test_every_role_to_draw_from_is_checked_whatever_the_seed() -> None:
    # Only the first was (through a drawn fault): `[primary, nobody]` was valid or not
    # depending on the seed that validate drew.
    text = (TEXT % 1).replace("    count: 5\n", "    count: 5\n    select: [primary, nobody]\n")
    with pytest.raises(ExperimentError) as info:
        load_experiment_text(text, "exp.yaml", {})
    assert info.value.field == "faults.random.select[1]"


@pytest.mark.parametrize(
    ("change", "where", "problem"),
    [
        ("  platform: sandbox\n  topology: rs1", "faults.random.select[1]",
         "drawn for the secondary: select secondary, but rs1 has no secondary"),
        ("  platform: kubernetes\n  uri: mongodb://a:1/?replicaSet=rs0\n"
         "  kubernetes: {namespace: x}\n  topology: rs3", "faults.random.kinds[1]",
         "drawn for the primary: an approximation"),
    ],
    ids=["role-the-topology-lacks", "kind-the-platform-approximates"],
)  # fmt: skip
def test_what_a_seed_may_draw_is_refused_whatever_the_seed(
    change: str, where: str, problem: str
) -> None:
    # Only the drawn faults were checked: without a seed in the file each load drew another,
    # and validate said ok or refused by chance.
    text = (
        "name: random\ntarget:\n  platform: sandbox\n  topology: rs3\nfaults:\n  random:\n"
        "    kinds: [stepdown, cpu-starve]\n    count: 1\n    select: [primary, secondary]\n"
    ).replace("  platform: sandbox\n  topology: rs3", change)
    for _ in range(3):
        with pytest.raises(ExperimentError) as info:
            load_experiment_text(text, "exp.yaml", {})
        assert info.value.field == where
        assert info.value.problem.startswith(problem), info.value.problem
