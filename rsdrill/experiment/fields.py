"""Field types shared by every part of the experiment schema, platform sections included:
durations, the strict model base, and a validator's complaint about one field."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, WithJsonSchema

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


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
            raise ValueError(f"{value!r} is not a duration like 20ms, 5s, 1m30s")
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    else:
        raise ValueError(f"{value!r} is not a duration like 20ms, 5s, 1m30s")
    if not math.isfinite(seconds):
        raise ValueError("a duration must be finite")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h))+$"},
                {"type": "number", "minimum": 0},
            ],
            "description": "a duration: 20ms, 5s, 1.5s, 2m, 1m30s, or a number of seconds",
        }
    ),
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldProblem(ValueError):
    """A model validator's complaint about one of the model's fields.

    `at` is the field's location relative to the model, so the loader can point at that
    field's line in the file instead of at the whole model; `problem` is the message alone;
    `about_key`: the complaint is about the mapping key at `at` (a name), not its value.
    """

    def __init__(self, at: tuple[str | int, ...], problem: str, *, about_key: bool = False) -> None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at).lstrip(".")
        super().__init__(f"{where}: {problem}")
        self.at = at
        self.problem = problem
        self.about_key = about_key


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
