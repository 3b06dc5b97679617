"""Field types shared by every part of the experiment schema, platform sections included:
durations, the strict model base, and a validator's complaint about one field."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# Longer than any run, soak or schedule step: past it a value is a typo, and sums of such values
# (a fault's end, a plan's timeline) would reach infinity, which JSON cannot carry.
MAX_DURATION_S = 365 * 24 * 3600.0


# The validation context's key saying the document is a file's (the loader sets it).
FROM_FILE = "from_file"

# A message quotes the value it refuses; past this many characters, only its two ends.
_QUOTED_MAX = 60


def quoted(value: Any, *, quote: bool = True) -> str:
    """`repr(value)` (or `str` without `quote`) for a message, cut in the middle when long:
    a 5000-digit number or a page of text would drown the one line it is in."""
    text = repr(value) if quote else str(value)
    if len(text) <= _QUOTED_MAX:
        return text
    length = len(value) if isinstance(value, str) else len(text)
    return f"{text[:40]}...{text[-12:]} ({length} characters)"


def parse_duration(value: Any) -> float:
    """`20ms`, `5s`, `1.5s`, `2m`, `1m30s`, `1h` or a number of seconds → seconds (>= 0)."""
    if isinstance(value, bool):
        raise ValueError("a duration, not true/false")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int past float's range: YAML reads `1000...0` as one
            raise ValueError("too large for a duration") from None
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"{quoted(value)} is not a duration like 20ms, 5s, 1m30s")
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    else:
        raise ValueError(f"{quoted(value)} is not a duration like 20ms, 5s, 1m30s")
    if not math.isfinite(seconds):
        raise ValueError("a duration must be finite")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds > MAX_DURATION_S:
        raise ValueError("a duration must be at most 8760h (a year)")
    return seconds


def _written_duration(value: Any, info: ValidationInfo) -> float:
    """A duration field's value. In a file a number needs its unit: `interval: 20` meant 20 ms
    as often as 20 s, and read as seconds it made a probe a thousand times coarser without a
    word. From Python a number is seconds (0 needs no unit anywhere)."""
    from_file = (info.context or {}).get(FROM_FILE)
    if from_file and isinstance(value, int | float) and not isinstance(value, bool) and value:
        number = quoted(value, quote=False)
        if len(number) > 20:  # too long to repeat twice
            raise ValueError(f"{number} has no unit: write it with s for seconds or ms for"
                             " milliseconds")  # fmt: skip
        raise ValueError(f"{number} has no unit: write {number}s for seconds, {number}ms for"
                         " milliseconds")  # fmt: skip
    return parse_duration(value)


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


Duration = Annotated[
    float,
    BeforeValidator(_written_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h))+$"},
                {"type": "integer", "minimum": 0, "maximum": 0},
            ],
            "description": "a duration with its unit: 20ms, 5s, 1.5s, 2m, 1m30s (at most"
            " 8760h, a year; from Python, a number of seconds)",
        }
    ),
]


# A member chosen by its role when the fault goes in (a fault's `select`, a random schedule's).
Role = Literal["primary", "secondary", "arbiter"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class FieldProblem(ValueError):
    """A model validator's complaint about one of the model's fields.

    `at` is the field's location relative to the model, so the loader can point at that
    field's line in the file instead of at the whole model; `problem` is the message alone;
    `about_key`: the complaint is about the mapping key at `at` (a name), not its value.
    """

    def __init__(self, at: tuple[str | int, ...], problem: str, *, about_key: bool = False) -> None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at).lstrip(".")
        super().__init__(f"{where}: {problem}" if where else problem)
        self.at = at
        self.problem = problem
        self.about_key = about_key


def nested_problem(exc: ValidationError, given: Any) -> FieldProblem:
    """The first error of a validation run inside a validator (a random schedule, a drawn
    fault, a matrix variant), as a FieldProblem at the place in `given` (the value validated)
    it is about, in words: a validator's own message without pydantic's "Value error, "
    prefix, and an unknown or missing key said so. The loader words the file's own errors
    itself; these reach it as one message."""
    error = _meant_alternative(exc.errors(include_url=False), given)
    at, _ = _place(error, given)
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, FieldProblem):
        return FieldProblem((*at, *cause.at), cause.problem, about_key=cause.about_key)
    if isinstance(cause, Exception):
        return FieldProblem(tuple(at), str(cause))
    if error["type"] == "extra_forbidden":
        return FieldProblem(tuple(at), "unknown key", about_key=True)
    if error["type"] == "missing":
        return FieldProblem(tuple(at), f"required field `{error['loc'][-1]}` is missing")
    return FieldProblem(tuple(at), str(error["msg"]))


def _place(error: Any, given: Any) -> tuple[list[str | int], list[int]]:
    """The error's place in `given` (the keys and indexes of its location that are the
    input's), and where in its location the other elements are: a union's alternative or a
    validator's name, which name no place in the file."""
    at: list[str | int] = []
    value, others = given, []
    for i, elem in enumerate(error["loc"]):
        indexed = isinstance(value, list | tuple) and isinstance(elem, int) and elem < len(value)
        if indexed or (isinstance(value, dict) and elem in value):
            value = value[elem]
            at.append(elem)
        else:
            others.append(i)
    return at, others


def _meant_alternative(errors: list[Any], given: Any) -> Any:
    """The first error, or, when it is one alternative's of a union, the first error of the
    alternative the input was most likely meant for: of those that took the input's shape (no
    error at the alternative's root), the one with the fewest errors (`{shard: any, zz: 1}` is
    a shard selection with an unknown key, not a misspelt role)."""
    first = errors[0]
    for branch in _place(first, given)[1]:
        point = tuple(first["loc"][:branch])
        alternatives: dict[Any, list[Any]] = {}
        for error in errors:
            loc = tuple(error["loc"])
            if loc[:branch] == point and len(loc) > branch:
                alternatives.setdefault(loc[branch], []).append(error)
        if len(alternatives) < 2:
            continue  # a validator's name, or a discriminated union's one tag: no choice here
        fitting = [errs for errs in alternatives.values()
                   if not any(len(e["loc"]) == branch + 1 and e["type"] not in _NOT_SHAPE
                              for e in errs)]  # fmt: skip
        return min(fitting, key=len)[0] if fitting else first
    return first


# Errors at an alternative's root that do not say it refused the input's shape.
_NOT_SHAPE = frozenset({"value_error", "assertion_error"})


def refuse_partition_shapes(index: int, fault: Any, how: str) -> None:
    """A platform that cuts one member off as a whole (`how`) refuses Jepsen's other shapes and
    flapping, naming the field."""
    if fault.shape != "one":
        raise FieldProblem(("faults", index, "shape"),
                           f"{how}: only shape one; the other shapes need the sandbox, local "
                           "or Kubernetes platform")  # fmt: skip
    if fault.flapping is not None:
        raise FieldProblem(("faults", index, "flapping"),
                           f"{how}: flapping needs the sandbox or local platform")  # fmt: skip
