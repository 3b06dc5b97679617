"""Seeded random fault schedules: `faults: {random: {seed, kinds, count, within}}`.

The same seed and spec always draw the same faults (Python's `random.Random` is stable across
versions for `random()`), so `rsdrill run FILE --seed N` replays a schedule exactly. Faults are
drawn one after another, each in its own slice of `within` and ended before the next begins
(with a gap), so a drawn schedule never takes more than one member down at once.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, model_validator

from rsdrill.faults import KIND_NAMES, KINDS
from rsdrill.fields import (
    Duration,
    FieldProblem,
    Role,
    Strict,
    nested_problem,
    parse_duration,
)

# Kinds a random schedule cannot draw: only a step of the user's brings the set back.
_NOT_DRAWN = tuple(k for k, spec in KINDS.items() if spec.disaster)
_GAP_S = 0.5


def seed_now() -> int:
    """A fresh seed for a run that names none."""
    return secrets.randbelow(2**32)


class RandomFaults(Strict):
    """`faults: {random: ...}`: a schedule drawn from a seed."""

    seed: int | None = Field(None, ge=0, description="default: a new one per run (recorded)")
    kinds: tuple[str | dict[str, Any], ...] = Field(
        min_length=1,
        description="kind names, or fault templates ({kind, ...options}) to draw from",
    )
    count: int = Field(3, ge=1, le=100, description="how many faults")
    start: Duration = Field(2.0, ge=0, description="no fault before this (the steady state)")
    within: Duration = Field(
        20.0, gt=0, description="the faults start and end within this, from `start`"
    )
    duration: tuple[Duration, Duration] = Field(
        (1.0, 5.0), description="[shortest, longest] fault (each one is drawn in between)"
    )
    select: tuple[Role, ...] = Field(
        ("primary", "secondary"), min_length=1, description="roles to draw the member from"
    )

    @model_validator(mode="after")
    def _templates(self, info: ValidationInfo) -> RandomFaults:
        # The fault model is the schema's, which imports this module: it comes as context.
        make_fault: Callable[..., object] | None = (info.context or {}).get("make_fault")
        if self.duration[0] > self.duration[1]:
            raise FieldProblem(("duration",), "write [shortest, longest]")
        for i, template in enumerate(self.templates()):
            kind = template.get("kind")
            if not isinstance(kind, str) or kind not in KIND_NAMES or kind in _NOT_DRAWN:
                drawable = ", ".join(k for k in KIND_NAMES if k not in _NOT_DRAWN)
                what = "a template needs `kind`" if kind is None else f"{kind!r} cannot be drawn"
                raise FieldProblem(("kinds", i), f"{what} (one of {drawable})")
            if make_fault is None:
                continue
            drawn = _fault(template, 0.0, self.duration[0], self.select[0])
            try:
                make_fault(**drawn)
            except ValidationError as exc:
                problem = nested_problem(exc, drawn)
                # A field the template names is pointed at; one the drawing adds is not in it.
                at = problem.at if problem.at[:1] and problem.at[0] in template else ()
                raise FieldProblem(("kinds", i, *at), f"as a drawn fault: {problem.problem}",
                                   about_key=problem.about_key and bool(at)) from None  # fmt: skip
        return self

    def templates(self) -> list[dict[str, Any]]:
        """Each entry of `kinds` as a fault template (a name gets its kind's defaults)."""
        out = []
        for entry in self.kinds:
            if isinstance(entry, str):
                drawn = KINDS[entry].drawn if entry in KINDS else {}
                out.append({"kind": entry, **drawn})
            else:
                out.append(dict(entry))
        return out

    def draw(self, seed: int) -> list[dict[str, Any]]:
        """The faults this seed draws, as fault documents (time order, none overlapping)."""
        rng = random.Random(seed)
        templates = self.templates()
        slot = self.within / self.count
        shortest, longest = self.duration
        faults = []
        for i in range(self.count):
            template = templates[int(rng.random() * len(templates))]
            room = max(slot - _GAP_S, 0.1)
            length = round(min(shortest + rng.random() * (longest - shortest), room), 1)
            start = round(self.start + i * slot + rng.random() * (room - length), 1)
            role = self.select[int(rng.random() * len(self.select))]
            faults.append(_fault(template, start, max(length, 0.1), role))
        return faults


def _fault(template: dict[str, Any], at: float, length: float, role: str) -> dict[str, Any]:
    # Only a primary can step down.
    role = "primary" if template["kind"] == "stepdown" else role
    # Written with their unit, as a file must (the drawn faults are validated as the file's).
    fault = {"at": _written(at), "select": role, "duration": _written(length), **template}
    if fault["kind"] == "stepdown":
        try:
            catch_up = parse_duration(fault.get("secondary_catch_up", "1s"))
        except ValueError:
            pass  # left as written: validating the drawn fault says what is wrong with it
        else:
            fault["secondary_catch_up"] = _written(min(catch_up, length))
    return fault


def _written(seconds: float) -> str:
    """`seconds` as a duration with its unit, to the microsecond."""
    return f"{seconds:.6f}".rstrip("0").rstrip(".") + "s"


def reseeded(document: dict[str, Any], spec: RandomFaults, seed: int) -> dict[str, Any]:
    """An experiment document (without faults) given `spec` drawn with `seed` instead."""
    random_doc = spec.model_dump(mode="json", exclude_defaults=True)
    return {**document, "faults": {"random": {**random_doc, "seed": seed}}}


def expand(
    data: Any,
    make_fault: Callable[..., object],
    seed: int | None = None,
    *,
    check: Callable[[dict[str, Any]], object] | None = None,
) -> Any:
    """An experiment document whose `faults: {random}` is replaced by the drawn faults, and
    the spec (its seed filled in) kept under `random_faults`. Other documents pass as they are.
    `make_fault` validates a fault (each template is checked as a drawn fault); `seed`
    overrides the file's (`rsdrill run --seed`); `check` validates an experiment document, with
    which every fault the spec can draw is checked in this experiment, whatever the seed."""
    if not isinstance(data, dict):
        return data
    faults = data.get("faults")
    if not (isinstance(faults, dict) and "random" in faults):
        return data
    for key in faults:
        if key != "random":
            raise FieldProblem(("faults", key), "unknown key: `faults:` is a list of faults or "
                               "{random: ...} alone", about_key=True)  # fmt: skip
    try:
        spec = RandomFaults.model_validate(faults["random"], context={"make_fault": make_fault})
    except ValidationError as exc:
        problem = nested_problem(exc, faults["random"])
        raise FieldProblem(("faults", "random", *problem.at), problem.problem,
                           about_key=problem.about_key) from None  # fmt: skip
    if check is not None:
        _refuse_undrawable(data, spec, check)
    chosen = seed if seed is not None else spec.seed if spec.seed is not None else seed_now()
    spec = spec.model_copy(update={"seed": chosen})
    return {**data, "faults": spec.draw(chosen), "random_faults": spec}


def _refuse_undrawable(
    data: dict[str, Any], spec: RandomFaults, check: Callable[[dict[str, Any]], object]
) -> None:
    """Each template drawn on each role, as the one fault of this experiment: a fault the
    platform or the topology refuses is refused whatever the seed (without a seed in the file,
    each load draws another, and validate said ok or not by chance)."""
    # The matrix would check every variant again; its own values are checked on the drawing.
    base = {key: value for key, value in data.items() if key != "matrix"}
    for i, template in enumerate(spec.templates()):
        for j, role in enumerate(spec.select):
            document = {**base, "faults": [_fault(template, spec.start, spec.duration[0], role)]}
            try:
                check(document)
            except ValidationError as exc:
                problem = nested_problem(exc, document)
                if problem.at[:2] != ("faults", 0):
                    continue  # not about the fault: the file's own validation says it
                field = problem.at[2:3]
                if field == ("select",) and "select" not in template:
                    at: tuple[str | int, ...] = ("select", j)  # the role drawn
                elif isinstance(spec.kinds[i], dict) and field and field[0] in template:
                    at = ("kinds", i, *problem.at[2:])  # the template's own field
                else:
                    at = ("kinds", i)
                raise FieldProblem(
                    ("faults", "random", *at), f"drawn for the {role}: {problem.problem}"
                ) from None
