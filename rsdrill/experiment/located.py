"""pydantic's errors about a document, traced to the key or value in the file that caused them
and put in words: one `ExperimentError` per problem, at its line and column."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rsdrill.experiment.problem import ExperimentError, Loc
from rsdrill.experiment.schema import DRAWN_FIELDS, FieldProblem
from rsdrill.experiment.yamltree import _Tree
from rsdrill.faults import KINDS, kinds_with_field
from rsdrill.fields import quoted
from rsdrill.suggest import did_you_mean

# A branch of a union whose error sits at the branch's root with one of these types did not
# even accept the shape of the input (a string given to a model, a mapping given to a literal).
_VALIDATOR_ERRORS = frozenset({"value_error", "assertion_error"})

# Errors about a mapping's key rather than its value: they point at the key.
_ABOUT_KEYS = frozenset({"extra_forbidden", "invalid_key"})


@dataclass(frozen=True)
class _Step:
    """One element of a pydantic error location, resolved against the schema and the file."""

    elem: str | int
    # tag: an alternative of a union tried in turn; variant: the one alternative a
    # discriminated union chose by its tag (as transparent to the user as a field's type)
    kind: Literal["field", "item", "key", "value", "tag", "variant", "unknown"]
    type_: Any  # the schema's type at this element
    node: Node | None  # the file's node for this element, when the file has it
    key: Node | None  # the key node of that value, when it is a mapping's value


@dataclass(frozen=True)
class _Located:
    """A pydantic error with its location resolved."""

    error: Mapping[str, Any]
    loc: Loc
    steps: tuple[_Step, ...]
    root: type[BaseModel]  # the document's model, whose fields the top-level keys are

    @property
    def kind(self) -> str:
        return str(self.error["type"])

    @property
    def tag_index(self) -> int | None:
        return next((i for i, s in enumerate(self.steps) if s.kind == "tag"), None)

    @property
    def field(self) -> Loc:
        """The location as the user names it: no union tags, no dict `[key]` markers."""
        return tuple(
            # An index the schema's types do not follow (a random schedule's) is still one.
            s.elem if s.kind == "item" or isinstance(s.elem, int) else str(s.elem)
            for s in self.steps
            if s.kind not in ("tag", "variant", "key")
        )


def _validation_issues(tree: _Tree, exc: ValidationError) -> list[ExperimentError]:
    errors = exc.errors(include_url=False)
    located = [_locate(tree, e) for err in errors for e in _discriminator_errors(tree, err)]
    located = [e for e in _reduce_unions(tree, located) if not _spurious_too_short(e)]
    return [_issue(tree, e) for e in _without_explained_missing(located)]


def _locate(tree: _Tree, error: Mapping[str, Any]) -> _Located:
    loc: Loc = tuple(error["loc"])
    if isinstance(problem := _ctx_error(error), FieldProblem):
        loc = (*loc, *problem.at)
    return _Located(error, loc, _walk(tree, loc), tree.model)


def _ctx_error(error: Mapping[str, Any]) -> Exception | None:
    return (error.get("ctx") or {}).get("error")


def _walk(tree: _Tree, loc: Loc) -> tuple[_Step, ...]:
    """Follow `loc` through the schema's types and, as far as it goes, the file's nodes."""
    type_: Any = tree.model
    node: Node | None = tree.root
    steps = []
    for elem in loc:
        kind, type_ = _type_step(type_, elem)
        key = None
        if kind in ("tag", "variant", "key"):
            pass  # not in the file: the node stays the one the union or dict key is about
        elif isinstance(node, MappingNode) and elem in tree.pairs(node):
            pair = tree.pairs(node)[elem]
            node, key = pair.value, pair.key
        elif isinstance(node, SequenceNode) and isinstance(elem, int) and elem < len(node.value):
            node = node.value[elem]
        else:
            node = None
        steps.append(_Step(elem, kind, type_, node, key))
    return tuple(steps)


def _unwrap(type_: Any) -> Any:
    """Strip Annotated and a None alternative (pydantic reports neither in locations)."""
    while typing.get_origin(type_) is typing.Annotated:
        type_ = typing.get_args(type_)[0]
    if _is_union(type_):
        members = [m for m in typing.get_args(type_) if m is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0])
    return type_


def _is_union(type_: Any) -> bool:
    return typing.get_origin(type_) in (typing.Union, types.UnionType)


def _is_model(type_: Any) -> bool:
    return isinstance(type_, type) and issubclass(type_, BaseModel)


def _type_step(type_: Any, elem: str | int) -> tuple[Any, Any]:
    if elem == "[key]":
        return "key", None
    type_ = _unwrap(type_)
    origin = typing.get_origin(type_)
    if _is_union(type_):
        members = typing.get_args(type_)
        if (variant := next((m for m in members if _is_variant(elem, m)), None)) is not None:
            return "variant", variant
        member = next((m for m in members if _is_tag_of(elem, m)), None)
        if member is not None:
            return "tag", member
        return _common_field(members, elem)
    if _is_model(type_):
        field = type_.model_fields.get(str(elem))
        return ("field", field.annotation) if field else ("unknown", None)
    if origin in (tuple, list):
        return "item", typing.get_args(type_)[0]
    if origin is dict:
        return "value", typing.get_args(type_)[1]
    return "unknown", None


def _is_tag_of(elem: str | int, member: Any) -> bool:
    """Whether `elem` is the tag pydantic gives union `member` in its errors' locations."""
    member = _unwrap(member)
    if typing.get_origin(member) is Literal:
        return str(elem).startswith("literal[")
    name = getattr(member, "__name__", None)
    # A model with a model validator is tagged by it: "function-after[_check(), Model]".
    validated = re.fullmatch(r"function-\w+\[.*, (\w+)\]", str(elem))
    return name == elem or (validated is not None and validated.group(1) == name)


def _is_variant(elem: str | int, member: Any) -> bool:
    """Whether `elem` is the discriminator value of a discriminated union's `member`."""
    member = _unwrap(member)
    return _is_model(member) and any(
        typing.get_origin(f.annotation) is Literal and typing.get_args(f.annotation) == (elem,)
        for f in member.model_fields.values()
    )


def _common_field(members: tuple[Any, ...], elem: str | int) -> tuple[Any, Any]:
    """A field every alternative has (a discriminated union's tag field: its values joined)."""
    models = [_unwrap(m) for m in members]
    if not models or not all(_is_model(m) and str(elem) in m.model_fields for m in models):
        return "unknown", None
    annotations = [m.model_fields[str(elem)].annotation for m in models]
    values = [v for a in annotations if typing.get_origin(a) is Literal for v in typing.get_args(a)]
    return "field", Literal[tuple(dict.fromkeys(values))] if values else annotations[0]


def _model_fields(type_: Any) -> list[str]:
    """A model's field names; of a union of models, every alternative's, in order."""
    type_ = _unwrap(type_)
    if _is_union(type_):
        names = [n for m in typing.get_args(type_) for n in _model_fields(m)]
        return list(dict.fromkeys(names))
    return list(type_.model_fields) if _is_model(type_) else []


def _discriminator_errors(tree: _Tree, error: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A discriminated union's complaint about its tag, as a plain field's would read: an
    unknown value of the tag field, or the tag field missing beside keys no alternative has."""
    if error["type"] not in ("union_tag_invalid", "union_tag_not_found"):
        return [error]
    name = str(error["ctx"]["discriminator"]).strip("'")
    given = error["input"]
    if not isinstance(given, dict):
        return [error]
    loc = tuple(error["loc"])
    if error["type"] == "union_tag_invalid":
        return [{**error, "type": "literal_error", "loc": (*loc, name), "input": given.get(name)}]
    known = _model_fields(_walk(tree, loc)[-1].type_ if loc else tree.model)
    unknown = [{**error, "type": "extra_forbidden", "loc": (*loc, key), "input": value}
               for key, value in given.items() if key not in known]  # fmt: skip
    return [{**error, "type": "missing", "loc": (*loc, name)}, *unknown]


def _reduce_unions(tree: _Tree, located: list[_Located]) -> list[_Located]:
    """Per union, keep the errors of the alternative the input was meant for, or one summary."""
    kept: list[_Located] = []
    unions: dict[Loc, list[_Located]] = {}
    for e in located:
        t = e.tag_index
        if t is None:
            kept.append(e)
        else:
            unions.setdefault(e.loc[:t], []).append(e)
    for point, errors in unions.items():
        kept.extend(_best_alternative(tree, point, errors))
    return kept


def _best_alternative(tree: _Tree, point: Loc, errors: list[_Located]) -> list[_Located]:
    by_tag: dict[str | int, list[_Located]] = {}
    for e in errors:
        by_tag.setdefault(e.loc[len(point)], []).append(e)
    union_step = errors[0].steps[len(point) - 1]
    given = tree.build(union_step.node, point) if union_step.node is not None else None
    fitting = [errs for errs in by_tag.values() if not _shape_mismatch(point, errs)]
    if not fitting:
        summary = {"type": "union_mismatch", "input": given, "union": union_step.type_}
        return [_Located(summary, point, errors[0].steps[: len(point)], errors[0].root)]

    def score(errs: list[_Located]) -> tuple[float, int]:
        return _key_affinity(given, errs[0].steps[len(point)].type_), -len(errs)

    return max(fitting, key=score)


def _shape_mismatch(point: Loc, errors: list[_Located]) -> bool:
    """Whether this alternative refused the input's shape outright (at its root)."""
    root_depth = len(point) + 1
    return any(len(e.loc) == root_depth and e.kind not in _VALIDATOR_ERRORS for e in errors)


def _key_affinity(given: Any, member: Any) -> float:
    """How well a mapping's keys match a model's field names (0 for anything else)."""
    member = _unwrap(member)
    if not (isinstance(given, dict) and _is_model(member)):
        return 0.0
    fields = list(member.model_fields)
    return sum(
        max(difflib.SequenceMatcher(None, str(key), f).ratio() for f in fields) for key in given
    )


def _spurious_too_short(e: _Located) -> bool:
    # pydantic counts only the items that validated, so a list whose one item is invalid is
    # also reported as too short; the item's own error says what is wrong.
    given = e.error.get("input")
    return (
        e.kind == "too_short"
        and isinstance(given, list | tuple)
        and len(given) >= e.error["ctx"]["min_length"]
    )


def _without_explained_missing(located: list[_Located]) -> list[_Located]:
    """Drop "X is missing" where an unknown key beside it looks like X: that is one mistake."""
    suggested = set()
    for e in located:
        if e.kind == "extra_forbidden" and (guess := _key_guess(e)):
            suggested.add((*e.field[:-1], guess))
    return [e for e in located if not (e.kind == "missing" and e.field in suggested)]


def _issue(tree: _Tree, e: _Located) -> ExperimentError:
    return tree.error(_pointed_node(tree, e), e.field, _problem(e))


def _pointed_node(tree: _Tree, e: _Located) -> Node:
    """The offending key or value; for a missing field, its parent mapping (by its key)."""
    node: Node = tree.root
    key: Node | None = None
    for step in e.steps:
        if step.kind == "key":
            return key or node
        if step.node is not None:
            node, key = step.node, step.key
    about_key = getattr(_ctx_error(e.error), "about_key", False)
    if e.kind in _ABOUT_KEYS or about_key or (key is not None and not isinstance(node, ScalarNode)):
        return key or node
    return node


# -- problems, in words --------------------------------------------------------------------------


def _problem(e: _Located) -> str:
    kind = e.kind
    given = e.error.get("input")
    if kind == "union_mismatch":
        return _alternatives_problem(given, typing.get_args(_unwrap(e.error["union"])))
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        variant, name = _variant(e), str(e.loc[-1])
        if variant in KINDS and (kinds := kinds_with_field(name)):
            listed = ", ".join(kinds[:-1]) + " and " + kinds[-1] if len(kinds) > 1 else kinds[0]
            return f"`{name}` applies to {listed}, not {variant}"
        guess = _key_guess(e)
        if guess:
            return f"unknown key; did you mean '{guess}'?"
        return f"unknown key (allowed: {', '.join(_allowed_keys(e))})"
    if kind == "literal_error":
        return _alternatives_problem(given, (e.steps[-1].type_,))
    problem = _ctx_error(e.error)
    if isinstance(problem, FieldProblem):
        return problem.problem
    if kind in _VALIDATOR_ERRORS and problem is not None:
        return str(problem)
    if kind == "invalid_key":
        return f"a key must be a text, not {_show(e.loc[-1])}"
    pattern = str((e.error.get("ctx") or {}).get("pattern"))
    if any(step.kind == "key" for step in e.steps):
        # A text key its pattern refuses (a check's name) once read "a key must be a text".
        if kind == "string_pattern_mismatch" and isinstance(given, str):
            return _PATTERN_WORDS.get(pattern) or str(e.error["msg"])
        return f"a key must be a text, not {_show(given)}"
    # A condition of `slo:` (not `slo:` itself, a mapping) is worded as a pattern's.
    if kind == "string_pattern_mismatch" or (e.field[:1] == ("slo",) and len(e.field) == 2):
        return _PATTERN_WORDS.get(pattern) or _pattern_problem(e.field, given, str(e.error["msg"]))
    return _type_problem(e.error, given)


def _parent_model(e: _Located) -> type[BaseModel]:
    parent = _unwrap(e.steps[-2].type_) if len(e.steps) > 1 else e.root
    return parent if _is_model(parent) else e.root


def _variant(e: _Located) -> str | int | None:
    """The tag of the discriminated union's alternative the error is in (a fault's kind)."""
    return next((s.elem for s in e.steps if s.kind == "variant"), None)


def _allowed_keys(e: _Located) -> list[str]:
    """The keys the mapping around an unknown key may have (a fault: those of its kind)."""
    parent = e.steps[-2].type_ if len(e.steps) > 1 else e.root
    names = _model_fields(parent) or list(e.root.model_fields)
    return [name for name in names if name not in DRAWN_FIELDS]


def _key_guess(e: _Located) -> str | None:
    return did_you_mean(str(e.loc[-1]), _allowed_keys(e))


def _alternatives_problem(given: Any, alternatives: Iterable[Any]) -> str:
    values: list[Any] = []
    others: list[str] = []
    for alt in map(_unwrap, alternatives):
        if typing.get_origin(alt) is Literal:
            values.extend(typing.get_args(alt))
        else:
            others.append(_describe_type(alt))
    words = [_show(v, quote=False) for v in values] + others
    names = [v for v in values if isinstance(v, str)]
    if isinstance(given, str) and names:
        listed = f"(one of {', '.join(words)})"
        guess = did_you_mean(given, names)
        if guess:
            return f"unknown value {quoted(given)}; did you mean '{guess}'? {listed}"
        return f"unknown value {quoted(given)} {listed}"
    return f"expected {_one_of(words)}, not {_show(given)}"


def _one_of(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _describe_type(type_: Any) -> str:
    if _is_model(type_):
        required = [n for n, f in type_.model_fields.items() if f.is_required()]
        return "{" + ", ".join(f"{n}: ..." for n in required or type_.model_fields) + "}"
    words = {int: "a whole number", float: "a number", bool: "true or false", str: "a text"}
    return words.get(type_, str(type_))


def _show(value: Any, quote: bool = True) -> str:
    """A value as it reads in YAML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return quoted(value, quote=quote and isinstance(value, str))


# pydantic says "String should match pattern '^https?://'": the schema's patterns in words. A
# URL is not quoted back: a webhook's may be a secret.
_PATTERN_WORDS = {
    r"^https?://": "not an http:// or https:// URL",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "not an environment variable's name: letters, digits and _, "
    "not starting with a digit",
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$": "not a Kubernetes name: lowercase letters, digits and "
    "-, starting and ending with a letter or digit",
    r"^[A-Za-z0-9_.:-]{1,15}$": "not a network interface's name: up to 15 letters, digits, "
    "_ . : or -",
    r"^[A-Za-z0-9_-]+$": "a check's name is letters, digits, _ and -",
}


def _pattern_problem(field: Loc, given: Any, fallback: str) -> str:
    if field[:1] == ("slo",):
        return (
            f"{_show(given)} is not a condition: an operator (<=, <, >=, >, ==, !=) "
            'and a number, e.g. "<= 15"'
        )
    if field[-1:] in (("host",), ("member",)):
        return f"{_show(given)} is not host:port"
    if field == ("name",):
        return f"{_show(given)}: use letters, digits, _ . - (starting with a letter or digit)"
    return fallback


_EXPECTED = {
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",  # a discriminated union's (a fault's)
    "dict_type": "a mapping",
    "tuple_type": "a list",
    "list_type": "a list",
    "string_type": "a text",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
}
_BOUNDS = {
    "greater_than": "more than",
    "greater_than_equal": "at least",
    "less_than": "less than",
    "less_than_equal": "at most",
}


def _type_problem(error: Mapping[str, Any], given: Any) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, not {_show(given)}"
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()))
        return f"must be {_BOUNDS[kind]} {limit}, not {_show(given)}"
    if kind == "too_short":
        if ctx["min_length"] == 1:
            return "must not be empty"
        return f"needs at least {ctx['min_length']} items"
    return str(error["msg"])
