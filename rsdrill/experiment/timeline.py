"""An incident timeline: faults at offsets, as an incident write-up lists them, to replay.

```yaml
name: 2024-05-incident
target: {platform: sandbox, topology: rs3}
events:
  - at: t+0                       # also t+40s, t+1m30s, or a plain duration (40s)
    kind: host-kill
    select: primary
    duration: 4s
    note: primary host lost (hypervisor crash)
  - at: t+40s
    kind: stepdown
    select: primary
```

Each event is an experiment fault (same fields and rules) plus an optional `note`; `at` is an
offset from t+0, the incident's start. The probes run `lead_in` before t+0, so the replay has a
baseline to compare against. `to_experiment()` makes the `Experiment` the runner carries out;
`timeline_from_result()` rebuilds one from a previous run's `result.json`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    create_model,
    model_validator,
)

from rsdrill.errors import RsdrillError
from rsdrill.experiment.schema import (
    FAULT_MODELS,
    Duration,
    Experiment,
    Fault,
    FieldProblem,
    Guards,
    Observe,
    Probes,
    SelectCount,
    Selection,
    SloConditions,
    Strict,
    Target,
    format_duration,
    make_fault,
    parse_duration,
)
from rsdrill.faults import KINDS
from rsdrill.result import FaultResult, Result

_OFFSET = re.compile(r"^[tT]\s*\+\s*(?P<rest>.+)$")


def parse_offset(value: Any) -> float:
    """`t+0`, `t+40s`, `t+1m30s`, or a plain duration (`40s`, `0`) → seconds from t+0."""
    if isinstance(value, str):
        text = value.strip()
        match = _OFFSET.match(text)
        if match:
            text = match.group("rest").strip()
        elif text.lower() == "t":
            return 0.0
        # A bare number after `t+` is seconds, as it is for a plain duration.
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return float(text)
        try:
            return parse_duration(text)
        except ValueError:
            raise ValueError(
                f"{value!r} is not an offset like t+0, t+40s, t+1m30s (or a duration)"
            ) from None
    return parse_duration(value)


def format_offset(seconds: float) -> str:
    return "t+0" if seconds == 0 else f"t+{format_duration(round(seconds, 3))}"


Offset = Annotated[
    float,
    BeforeValidator(parse_offset),
    PlainSerializer(format_offset, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^([tT]\s*\+\s*)?\S+$"},
                {"type": "number", "minimum": 0},
            ],
            "description": "an offset from the incident's start: t+0, t+40s, t+1m30s",
        }
    ),
]


class _Event(Strict):
    """One fault of the incident: an experiment fault at an offset, with what it stands for."""

    at: Offset = Field(description="offset from the incident's start (t+0)")
    note: str = Field("", description="what happened, in the incident's words")

    def to_fault(self, lead_in_s: float) -> Fault:
        """The experiment fault: the same fields, `at` counted from the start of the probes."""
        fields = {name: getattr(self, name) for name in self.model_fields_set - {"note"}}
        return make_fault(**{**fields, "at": lead_in_s + self.at})


# An event of each kind is that kind's fault with an offset and a note.
_EVENT_MODELS = tuple(
    create_model(model.__name__.replace("Fault", "Event"), __base__=(_Event, model),
                 __module__=__name__)
    for model in FAULT_MODELS.values()
)  # fmt: skip
if TYPE_CHECKING:
    # What type checkers see: every event model is an _Event (and its kind's fault model).
    TimelineEvent = _Event
else:
    TimelineEvent = Annotated[Union[_EVENT_MODELS], Field(discriminator="kind")]  # noqa: UP007


class Timeline(Strict):
    """One timeline file."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    target: Target
    lead_in: Duration = Field(2.0, description="the probes run this long before t+0")
    events: tuple[TimelineEvent, ...] = Field(min_length=1)
    probes: Probes = Probes()
    observe: Observe = Observe()
    slo: SloConditions = Field(
        default_factory=dict, description='metric → condition, e.g. write_unavailable_s: "<= 15"'
    )
    guards: Guards = Guards()

    def to_experiment(self) -> Experiment:
        """The experiment that replays this timeline (validated when the timeline was)."""
        return Experiment.model_validate(self._experiment_fields())

    def _experiment_fields(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "target": self.target,
            "probes": self.probes,
            "faults": tuple(event.to_fault(self.lead_in) for event in self.events),
            "observe": self.observe,
            "slo": self.slo,
            "guards": self.guards,
        }

    @model_validator(mode="after")
    def _makes_a_valid_experiment(self) -> Timeline:
        # The experiment's own checks (selections against the topology, ...) report against
        # the timeline's fields: its `faults[i]` are this file's `events[i]`.
        try:
            self.to_experiment()
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            loc = tuple(error["loc"])
            problem = (error.get("ctx") or {}).get("error")
            if isinstance(problem, FieldProblem):
                loc, message = (*loc, *problem.at), problem.problem
            else:
                message = str(error["msg"])
            if loc[:1] == ("faults",):
                loc = ("events", *loc[1:])
            raise FieldProblem(loc, message) from None
        return self

    def to_yaml(self) -> str:
        """The timeline as a file (only what differs from the defaults, plus the essentials)."""
        import yaml

        document = self.model_dump(mode="json", exclude_defaults=True)
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


class ReplayError(RsdrillError, ValueError):
    """A previous run's result that cannot be turned into a replay."""


def timeline_from_result(result: Result, target: Target) -> Timeline:
    """The fault sequence of a previous run, to run again against `target`.

    Offsets are the faults' `injected_at_s` (from the start of the probes, so no lead-in),
    durations `reverted_at_s - applied_at_s` (the run holds a fault from when its injection
    returned; `injected_at_s` for results without it), and each target host becomes the role it had
    when it was injected (`detail.role`): the replay's set has other hosts. The members one
    `count:` fault took down (`detail.index` shared) become that count again. The fault's
    other options (a stepdown's period, a disk fault's errno, ...) come from `detail.options`;
    a result without them (an older rsdrill) replays with the defaults. The run's SLOs come
    along: a replay is judged as the run it repeats was.
    """
    groups: dict[object, list[FaultResult]] = {}
    for n, fault in enumerate(result.faults):
        if fault.injected_at_s is None:
            continue  # never injected: nothing to reproduce
        groups.setdefault(fault.detail.get("index", ("alone", n)), []).append(fault)
    events = []
    for faults in groups.values():
        first = faults[0]
        assert first.injected_at_s is not None
        roles = [_role(f) for f in faults]
        select: Selection | str
        if len(faults) > 1:
            every_secondary = all(r == "secondary" for r in roles)
            select = SelectCount(count=len(faults), role="secondary" if every_secondary else "any")
        else:
            select = roles[0]
        event: dict[str, Any] = {
            **first.detail.get("options", {}),
            "at": round(first.injected_at_s, 3),
            "kind": first.kind,
            "select": select,
            "note": f"{first.kind} on {first.target} ({_state(first)}) in the original run",
        }
        in_force = first.applied_at_s if first.applied_at_s is not None else first.injected_at_s
        held = (
            None
            if first.reverted_at_s is None
            else round(max(first.reverted_at_s - in_force, 0.0), 3)
        )
        spec = KINDS.get(first.kind)  # an unknown kind is refused below, naming it
        if spec is not None and held is None and spec.for_good:
            event.update(spec.for_good)  # the original run never reverted it
        elif spec is None or spec.reverted:
            event["duration"] = held  # as long as it really lasted (a stepdown's is its period)
        events.append(event)
    if not events:
        raise ReplayError("the result has no injected fault to replay")
    return Timeline.model_validate(
        {
            "name": f"{result.experiment}-replay",
            "description": f"replay of {result.experiment} started {result.started_at}",
            "target": target,
            "lead_in": 0,
            "events": events,
            "slo": {slo.metric: f"{slo.op} {slo.threshold!r}" for slo in result.slo},
        }
    )


def _state(fault: FaultResult) -> str:
    return str(fault.detail.get("role") or "role not recorded")


def _role(fault: FaultResult) -> str:
    state = fault.detail.get("role")
    role = str(state).lower() if state else None
    if role not in ("primary", "secondary", "arbiter"):
        raise ReplayError(
            f"{fault.kind} on {fault.target}: "
            + (
                f"its member was {state} when injected, not a role a fresh set has"
                if state
                else "the result does not record the member's role (made by an older rsdrill)"
            )
        )
    return role
