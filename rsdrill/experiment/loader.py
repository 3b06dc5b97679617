"""Read an experiment file into an `Experiment`, or fail with one `FILE:LINE:COL` error.

The YAML is composed into nodes (which keep their start marks) and built into plain Python
values by hand, so that every pydantic error can be traced back to the key or value that caused
it. Along the way: `${VAR}` substitution in string values, duplicate keys rejected, and unknown
names answered with a did-you-mean. Top-level keys starting with `x-` are ignored, as in Compose
files, so that anchors can be defined there. When a file has several problems, the first one in
the file is reported.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rsdrill.errors import RsdrillError
from rsdrill.experiment.schema import DRAWN_FIELDS, FROM_FILE, Experiment, FieldProblem
from rsdrill.faults import KINDS, kinds_with_field
from rsdrill.fields import quoted
from rsdrill.suggest import did_you_mean

Loc = tuple[str | int, ...]

# The document a file holds: an experiment, or another file format built from the same parts
# (a timeline); each gets the same located errors.
Model = TypeVar("Model", bound=BaseModel)

EXTENSION_PREFIX = "x-"

_STR_TAG = "tag:yaml.org,2002:str"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG = "tag:yaml.org,2002:bool"

# `$${` is a literal `${`; `${NAME}` and `${NAME:-default}` are substituted; any other `${` is
# a mistake worth reporting rather than passing on to a connection string.
_ENV_REF = re.compile(
    r"\$\$\{|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|\$\{"
)

# A branch of a union whose error sits at the branch's root with one of these types did not
# even accept the shape of the input (a string given to a model, a mapping given to a literal).
_VALIDATOR_ERRORS = frozenset({"value_error", "assertion_error"})

# Errors about a mapping's key rather than its value: they point at the key.
_ABOUT_KEYS = frozenset({"extra_forbidden", "invalid_key"})


class ExperimentError(RsdrillError):
    """An experiment file that cannot be used, located at one line and column (1-based).

    `str(err)` is `"{path}:{line}:{col}: {field}: {problem}"`, or without `{field}: ` when the
    problem is not about one field (an unreadable file, a YAML syntax error).
    """

    def __init__(
        self, path: str, line: int, col: int, problem: str, field: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.col = col
        self.field = field
        self.problem = problem
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}:{self.col}"
        return (
            f"{where}: {self.field}: {self.problem}" if self.field else f"{where}: {self.problem}"
        )


def load_experiment(path: Path, env: Mapping[str, str] | None = None) -> Experiment:
    """Read and validate the experiment file at `path`.

    `env` supplies `${VAR}` values (default: the process environment). Raises ExperimentError.
    """
    return load_document(Experiment, path, env)


def load_experiment_text(
    text: str | bytes, source_name: str = "<text>", env: Mapping[str, str] | None = None
) -> Experiment:
    """Validate an experiment given as text (bytes are decoded as UTF-8); see `load_experiment`.

    `source_name` is the path that error messages name. Raises ExperimentError.
    """
    return load_document_text(Experiment, text, source_name, env)


def check_experiment_file(
    path: Path, env: Mapping[str, str] | None = None
) -> list[ExperimentError]:
    """Check the experiment file at `path` without needing its environment: a `${VAR}` left
    unset (no default) is kept as written and its value goes unchecked. Returns one note per
    such value; raises ExperimentError for any other problem, as `load_experiment` would."""
    data = _read(path)
    text = _decode(data, str(path))
    tree = _Tree(text, str(path), os.environ if env is None else env, Experiment,
                 require_env=False)  # fmt: skip
    if tree.issues:
        raise _first(tree.issues)
    unchecked = {(note.line, note.col) for note in tree.unset}
    try:
        Experiment.model_validate(
            {k: v for k, v in tree.data.items() if not _is_extension(k)},
            context={FROM_FILE: True},
        )
    except ValidationError as exc:
        issues = [i for i in _validation_issues(tree, exc) if (i.line, i.col) not in unchecked]
        if issues:
            raise _first(issues) from None
    return tree.unset


def load_document(model: type[Model], path: Path, env: Mapping[str, str] | None = None) -> Model:
    """Read and validate the file at `path` as a `model` document; see `load_experiment`."""
    data = _read(path)
    return load_document_text(model, data, str(path), env)


def load_document_text(
    model: type[Model],
    text: str | bytes,
    source_name: str = "<text>",
    env: Mapping[str, str] | None = None,
) -> Model:
    """Validate `text` as a `model` document, with located errors; see `load_experiment_text`.

    `model` is validated from the file's top-level mapping; its fields are found in the file as
    an experiment's are.
    """
    if isinstance(text, bytes):
        text = _decode(text, source_name)
    tree = _Tree(text, source_name, os.environ if env is None else env, model)
    # A duplicate key or an unset variable explains the schema's complaints, so it goes first.
    if tree.issues:
        raise _first(tree.issues)
    data = {k: v for k, v in tree.data.items() if not _is_extension(k)}
    try:
        return model.model_validate(data, context={FROM_FILE: True})
    except ValidationError as exc:
        raise _first(_validation_issues(tree, exc)) from None


# Far more than any experiment file; a device or a stream without end stops here.
MAX_FILE_BYTES = 16 * 1024 * 1024


def _read(path: Path) -> bytes:
    """The file's bytes (a pipe's too, as `<(...)` gives), at most MAX_FILE_BYTES of them."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ExperimentError(str(path), 1, 1, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ExperimentError(str(path), 1, 1, f"larger than {MAX_FILE_BYTES // 2**20} MiB: "
                              "not an experiment file")  # fmt: skip
    return data


def _is_extension(key: Any) -> bool:
    """Top-level `x-...` keys are the file's own (a place for YAML anchors), not the schema's."""
    return isinstance(key, str) and key.startswith(EXTENSION_PREFIX)


def _first(issues: list[ExperimentError]) -> ExperimentError:
    return min(issues, key=lambda e: (e.line, e.col))


def _decode(data: bytes, source_name: str) -> str:
    if b"\0" in data:
        raise ExperimentError(source_name, 1, 1, "binary data, not a YAML text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        good = data[: exc.start].decode("utf-8-sig")
        line, col = _line_col(good, len(good))
        raise ExperimentError(
            source_name, line, col, f"not UTF-8 text (byte 0x{data[exc.start]:02x})"
        ) from None


def _line_col(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of `text[index]`."""
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


# -- YAML nodes → Python values ------------------------------------------------------------------


@dataclass(frozen=True)
class _Pair:
    key: ScalarNode
    value: Node


class _Tree:
    """One file's YAML nodes, the Python values built from them, and the issues seen doing so."""

    def __init__(
        self,
        text: str,
        source_name: str,
        env: Mapping[str, str],
        model: type[BaseModel] = Experiment,
        *,
        require_env: bool = True,
    ) -> None:
        """Parse `text`; raises ExperimentError when it holds no mapping to validate.

        Without `require_env`, a `${VAR}` that is unset stays as written and is noted in
        `unset` instead of being an issue."""
        self.text = text
        self.require_env = require_env
        self.unset: list[ExperimentError] = []
        self.model = model
        self.source_name = source_name
        self.env = env
        self.issues: list[ExperimentError] = []
        # Both keyed by id(node): an alias is the same node object as its anchor, so each node
        # is built once however often it is referred to (no billion laughs).
        self._values: dict[int, Any] = {}
        self._pairs: dict[int, dict[Any, _Pair]] = {}
        self._building: set[int] = set()
        self._loader, root = self._compose()
        if not isinstance(root, MappingNode):
            kind = "a list" if isinstance(root, SequenceNode) else "a single value"
            raise self.error(root, None, f"the top level must be a mapping, not {kind}")
        self.root: MappingNode = root
        try:
            self.data: dict[Any, Any] = self.build(root, ())
        except RecursionError:
            raise self.error(root, None, "nested too deeply") from None
        if model is Experiment and "events" in self.data and "faults" not in self.data:
            # An incident timeline: its faults are `events:` at offsets.
            problem = (f"this is an incident timeline (events:, not faults:): `rsdrill replay "
                       f"{source_name}` runs it")  # fmt: skip
            raise self.error(self.pairs(root)["events"].key, None, problem)

    def _compose(self) -> tuple[yaml.SafeLoader, Node]:
        try:
            loader = yaml.SafeLoader(self.text)
            try:
                root = loader.get_single_node()
            finally:
                loader.dispose()
        except yaml.MarkedYAMLError as exc:
            raise self._syntax_error(exc) from None
        except yaml.reader.ReaderError as exc:
            line, col = _line_col(self.text, exc.position)
            problem = f"character #x{exc.character:04x} is not allowed in YAML"
            raise ExperimentError(self.source_name, line, col, problem) from None
        except RecursionError:
            raise ExperimentError(self.source_name, 1, 1, "nested too deeply") from None
        if root is None or (isinstance(root, ScalarNode) and root.value == "" and not root.style):
            raise ExperimentError(self.source_name, 1, 1, "empty file: no experiment in it")
        return loader, root

    def _syntax_error(self, exc: yaml.MarkedYAMLError) -> ExperimentError:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed"
        if "'\\t'" in problem:
            problem += " (indent with spaces: YAML does not allow tabs there)"
        elif exc.problem and exc.context and problem.startswith("but "):
            problem = f"{exc.context}, {problem}"
        elif exc.problem and exc.context and exc.context_mark:
            problem += f" ({exc.context} at line {exc.context_mark.line + 1})"
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return ExperimentError(self.source_name, line, col, f"invalid YAML: {problem}")

    def error(self, node: Node, loc: Loc | None, problem: str) -> ExperimentError:
        mark = node.start_mark
        field = _dotted(loc) if loc else None
        return ExperimentError(self.source_name, mark.line + 1, mark.column + 1, problem, field)

    def build(self, node: Node, loc: Loc) -> Any:
        """The Python value of `node`; `loc` (where it was first met) names it in issues."""
        key = id(node)
        if key in self._values:
            return self._values[key]
        if key in self._building:
            raise self.error(node, loc, "an alias refers to a node that contains it")
        self._building.add(key)
        try:
            if isinstance(node, MappingNode):
                value: Any = self._build_mapping(node, loc)
            elif isinstance(node, SequenceNode):
                value = self._build_sequence(node, loc)
            else:
                assert isinstance(node, ScalarNode)  # PyYAML composes no other kind of node
                value = self._build_scalar(node, loc)
        finally:
            self._building.discard(key)
        self._values[key] = value
        return value

    def pairs(self, node: MappingNode) -> dict[Any, _Pair]:
        """Key value → its key and value nodes, merges included (after `build`)."""
        return self._pairs[id(node)]

    def _build_mapping(self, node: MappingNode, loc: Loc) -> dict[Any, Any]:
        if node.tag != _MAP_TAG:
            raise self.error(node, loc, f"unsupported YAML tag {node.tag}")
        explicit: dict[Any, _Pair] = {}
        merged: dict[Any, _Pair] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                for source in self._merge_sources(value_node, loc):
                    for name, pair in self.pairs(source).items():
                        merged.setdefault(name, pair)
                continue
            name = self._key(key_node, loc)
            if name in explicit:
                first = explicit[name].key.start_mark.line + 1
                self.issues.append(
                    self.error(
                        key_node, (*loc, str(name)), f"duplicate key (first at line {first})"
                    )
                )
            explicit[name] = _Pair(key_node, value_node)
        pairs = {**merged, **explicit}
        self._pairs[id(node)] = pairs
        return {name: self.build(pair.value, (*loc, str(name))) for name, pair in pairs.items()}

    def _merge_sources(self, node: Node, loc: Loc) -> list[MappingNode]:
        sources: list[MappingNode] = []
        for source in node.value if isinstance(node, SequenceNode) else [node]:
            if not isinstance(source, MappingNode):
                raise self.error(source, loc, "`<<` merges only mappings")
            self.build(source, loc)
            sources.append(source)
        return sources

    def _key(self, node: Node, loc: Loc) -> Any:
        if not isinstance(node, ScalarNode):
            raise self.error(node, loc, "a key must be a plain value, not a mapping or a list")
        if node.tag == _BOOL_TAG and node.style is None:
            # Every key of a file is a text: `on:` (a notification's events) is the word, not
            # YAML 1.1's true, as in YAML 1.2 and CI files.
            return node.value
        return self._construct_scalar(node, loc)

    def _build_sequence(self, node: SequenceNode, loc: Loc) -> list[Any]:
        if node.tag != _SEQ_TAG:
            raise self.error(node, loc, f"unsupported YAML tag {node.tag}")
        return [self.build(item, (*loc, i)) for i, item in enumerate(node.value)]

    def _build_scalar(self, node: ScalarNode, loc: Loc) -> Any:
        if node.tag == _STR_TAG:
            return self._substitute(node, loc)
        return self._construct_scalar(node, loc)

    def _construct_scalar(self, node: ScalarNode, loc: Loc) -> Any:
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            raise self._syntax_error(exc) from None
        except (ValueError, TypeError, OverflowError):
            # PyYAML's own constructors fail this way on e.g. `2024-13-45` or `!!int x`.
            kind = node.tag.rpartition(":")[2]
            problem = (
                f"{quoted(node.value)} reads as a {kind} but is not a valid one (quote a text)"
            )
            if kind == "int" and re.fullmatch(r"[-+]?[0-9_]+", node.value):
                # Python reads no more than 4300 digits into an int.
                problem = f"a whole number of {len(node.value)} characters is too large"
            raise self.error(node, loc, problem) from None

    def _substitute(self, node: ScalarNode, loc: Loc) -> str:
        unset: list[str] = []

        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "${"
            name = match.group("name")
            if name is None:
                raise _BadReference(
                    "malformed ${...}: write ${NAME}, ${NAME:-default}, or $${ for a literal ${"
                )
            value = self.env.get(name)
            if value is None or (value == "" and match.group("default") is not None):
                if match.group("default") is None and not self.require_env:
                    unset.append(name)
                    return match.group(0)
                if match.group("default") is None:
                    # validate checks a file without it; plan, check and run read the value.
                    raise _BadReference(
                        f"environment variable {name} is not set: plan, check and run need its "
                        f"value (or write ${{{name}:-default}})"
                    )
                return match.group("default")
            return value

        try:
            value = _ENV_REF.sub(replace, node.value)
        except _BadReference as exc:
            self.issues.append(self.error(node, loc, str(exc)))
            return node.value
        if unset:
            names = " and ".join(dict.fromkeys(unset))
            self.unset.append(self.error(node, loc, f"{names} not set: checked without its "
                                         "value (`--strict` and `run` need it)"))  # fmt: skip
        return value


class _BadReference(Exception):
    """A `${...}` that cannot be substituted."""


def _dotted(loc: Iterable[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{_key(p)}" for p in loc).lstrip(".")


def _key(name: str) -> str:
    """A key as the message shows it: quoted and escaped when it is empty, has spaces at its
    ends or characters that do not print (a newline would break the one-line message)."""
    return name if name.isprintable() and name.strip() == name and name else json.dumps(name)


# -- pydantic errors → located issues ------------------------------------------------------------


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
    return getattr(member, "__name__", None) == elem


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
    if any(step.kind == "key" for step in e.steps):
        return f"a key must be a text, not {_show(given)}"
    # A condition of `slo:` (not `slo:` itself, a mapping) is worded as a pattern's.
    if kind == "string_pattern_mismatch" or (e.field[:1] == ("slo",) and len(e.field) == 2):
        return _pattern_problem(e.field, given, str(e.error["msg"]))
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
