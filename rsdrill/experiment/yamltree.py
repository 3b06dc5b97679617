"""A YAML file composed into nodes that keep their marks, built into plain Python values by
hand: `${VAR}` substitution in strings, duplicate keys refused, merges and anchors followed, and
every value traceable back to the node it came from (experiment/located.py points at it)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rsdrill.experiment.problem import ExperimentError, Loc, line_col
from rsdrill.experiment.schema import Experiment
from rsdrill.fields import quoted

_STR_TAG = "tag:yaml.org,2002:str"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG = "tag:yaml.org,2002:bool"

# `$${` is a literal `${`; `${NAME}` and `${NAME:-default}` are substituted; any other `${` is
# a mistake worth reporting rather than passing on to a connection string.
ENV_REF = re.compile(r"\$\$\{|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|\$\{")


MAX_DEPTH = 100
"""Collections within collections, far beyond any experiment file's: PyYAML's pure-Python
scanner, which keeps the marks every message points at, takes time quadratic in the nesting of
flow collections (5,000 levels of `[`, a 10 KB file: 4 s of CPU), so deeper text is refused
before it gets there."""
_OPENS = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken,
          yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)  # fmt: skip
_CLOSES = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def _too_deep(text: str) -> yaml.Mark | None:
    """Where `text` first nests deeper than MAX_DEPTH, by libyaml's scanner (linear enough in
    C); None when it does not, when it is not valid YAML (the composer says why, with its own
    words) or when PyYAML was built without libyaml."""
    scanner = getattr(yaml, "CSafeLoader", None)
    if scanner is None:
        return None
    tokens = scanner(text)
    depth = 0
    try:
        while (token := tokens.get_token()) is not None:
            depth += isinstance(token, _OPENS) - isinstance(token, _CLOSES)
            if depth > MAX_DEPTH:
                return token.start_mark
    except yaml.MarkedYAMLError as exc:
        # libyaml's own limit (1,000 levels) comes first when the text is that deep.
        return exc.problem_mark if "nesting depth" in (exc.problem or "") else None
    except yaml.YAMLError:
        return None
    finally:
        tokens.dispose()
    return None


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
        deep = _too_deep(self.text)
        if deep is not None:
            raise ExperimentError(self.source_name, deep.line + 1, deep.column + 1,
                                  f"nested too deeply (more than {MAX_DEPTH} levels)")  # fmt: skip
        try:
            loader = yaml.SafeLoader(self.text)
            try:
                root = loader.get_single_node()
            finally:
                loader.dispose()
        except yaml.MarkedYAMLError as exc:
            raise self._syntax_error(exc) from None
        except yaml.reader.ReaderError as exc:
            line, col = line_col(self.text, exc.position)
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
            value = ENV_REF.sub(replace, node.value)
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
