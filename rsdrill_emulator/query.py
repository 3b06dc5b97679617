"""MongoDB query semantics on plain documents: matching, updates, projection and sort.

Documents are dicts as decoded by `bson.decode` with the default codec. Everything here is pure:
no I/O, no state, arguments are never mutated and returned documents share nothing with them.
Filters and projections are parsed before any document is looked at, so a malformed one raises
`QueryError` even when there is nothing to match. The values it compares are `values`; the
expression language (`$expr`) is `expressions`; aggregation and pipeline-style updates are
`pipeline`, which builds on this module.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cmp_to_key
from typing import Any

from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.regex import Regex

from rsdrill_emulator.expressions import compile_expression, or_null
from rsdrill_emulator.values import (
    _BOOL,
    _BSON_KEY,
    _MISSING,
    _NUMBER,
    _STRING,
    _TYPES,
    QueryError,
    _add,
    _as_int,
    _bracket,
    _is_nan,
    _is_number,
    _is_operator_object,
    _regex_letters,
    _sign,
    _truthy,
    _type_name,
    compare,
)

Document = dict[str, Any]
Predicate = Callable[[Mapping[str, Any]], bool]
# Tests the values a path resolved to in one document (see `_resolve`).
ValuesTest = Callable[[list[Any]], bool]


# ---------------------------------------------------------------------------------------------
# BSON comparison order


# ---------------------------------------------------------------------------------------------
# Matching

_LOGICAL = ("$and", "$or", "$nor")
_ORDER_CHECKS: dict[str, Callable[[int], bool]] = {
    "$eq": lambda order: order == 0,
    "$gt": lambda order: order > 0,
    "$gte": lambda order: order >= 0,
    "$lt": lambda order: order < 0,
    "$lte": lambda order: order <= 0,
}
_TYPE_ALIASES = {alias: {code} for _, code, alias in _TYPES} | {"number": {1, 16, 18, 19}}
_PY_REGEX_FLAGS = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE


def matches(doc: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether `doc` satisfies the query `filter` (an empty filter matches everything)."""
    return compile_filter(filter)(doc)


def compile_filter(
    filter: Mapping[str, Any], variables: Mapping[str, Any] | None = None
) -> Predicate:
    """Parse `filter` once into a predicate; raises QueryError for malformed filters.
    `variables` are what `$expr` expressions see as `$$name` (a command's `let`)."""
    if not isinstance(filter, Mapping):
        raise QueryError(2, "filter must be an object")
    clauses = [
        _compile_clause(key, condition, variables or {}) for key, condition in filter.items()
    ]
    return lambda doc: all(clause(doc) for clause in clauses)


def _compile_clause(key: str, condition: Any, variables: Mapping[str, Any]) -> Predicate:
    if key in _LOGICAL:
        return _compile_logical(key, condition, variables)
    if key == "$comment":
        return lambda doc: True
    if key == "$expr":
        evaluate = compile_expression(condition)
        return lambda doc: _truthy(or_null(evaluate(doc, variables)))
    if key.startswith("$"):
        raise QueryError(2, f"unknown top level operator: {key}")
    parts = key.split(".")
    test = _compile_condition(condition)
    return lambda doc: test(_resolve(doc, parts))


def _compile_logical(operator: str, clauses: Any, variables: Mapping[str, Any]) -> Predicate:
    if not isinstance(clauses, list) or not clauses:
        raise QueryError(2, f"{operator} must be a nonempty array")
    if not all(isinstance(clause, Mapping) for clause in clauses):
        raise QueryError(2, f"{operator} argument's entries must be objects")
    predicates = [compile_filter(clause, variables) for clause in clauses]
    if operator == "$and":
        return lambda doc: all(predicate(doc) for predicate in predicates)
    if operator == "$or":
        return lambda doc: any(predicate(doc) for predicate in predicates)
    return lambda doc: not any(predicate(doc) for predicate in predicates)


def _resolve(value: Any, parts: list[str]) -> list[Any]:
    """The values a dotted path reaches, descending into arrays of documents like MongoDB.

    A numeric part indexes an array; any other part is looked up in each document element.
    Where the path ends early the result holds `_MISSING`, which is how `{a: null}` matches
    documents without `a`.
    """
    if not parts:
        return [value]
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict):
        return _resolve(value[head], rest) if head in value else [_MISSING]
    if isinstance(value, list):
        if _is_index(head) and int(head) < len(value):
            return _resolve(value[int(head)], rest)
        found = [hit for item in value if isinstance(item, dict) for hit in _resolve(item, parts)]
        return found or [_MISSING]
    return [_MISSING]


def distinct_values(docs: Iterable[Mapping[str, Any]], key: str) -> list[Any]:
    """`distinct`: the values `key` reaches in `docs`, arrays unwound one level, each once
    (by BSON equality), in the order first seen."""
    seen: list[Any] = []
    for doc in docs:
        for value in _resolve(dict(doc), key.split(".")):
            for item in value if isinstance(value, list) else [value]:
                if item is not _MISSING and not any(compare(item, s) == 0 for s in seen):
                    seen.append(item)
    return seen


def _is_index(part: str) -> bool:
    return part.isascii() and part.isdigit() and (part == "0" or not part.startswith("0"))


def _expand(values: list[Any]) -> Iterator[Any]:
    """Each value and, for arrays, each element: MongoDB's implicit matching of array fields."""
    for value in values:
        if isinstance(value, list):
            yield from value
        yield value


def _compile_condition(condition: Any) -> ValuesTest:
    """The test for one field's condition: a literal, a regex or a document of operators."""
    if isinstance(condition, (Regex, re.Pattern)):
        return _regex_test(condition)
    if not _is_operator_object(condition):
        return _comparison_test(condition, _ORDER_CHECKS["$eq"])
    if "$options" in condition and "$regex" not in condition:
        raise QueryError(2, "$options needs a $regex")
    tests = [
        _compile_operator(operator, argument, condition)
        for operator, argument in condition.items()
        if operator != "$options"
    ]
    return lambda values: all(test(values) for test in tests)


def _compile_operator(operator: str, argument: Any, siblings: dict[str, Any]) -> ValuesTest:
    match operator:
        case "$eq" | "$gt" | "$gte" | "$lt" | "$lte":
            return _comparison_test(argument, _ORDER_CHECKS[operator])
        case "$ne":
            return _negate(_comparison_test(argument, _ORDER_CHECKS["$eq"]))
        case "$in":
            return _in_test(operator, argument)
        case "$nin":
            return _negate(_in_test(operator, argument))
        case "$exists":
            wanted = _truthy(argument)
            return lambda values: any(value is not _MISSING for value in values) == wanted
        case "$not":
            return _negate(_not_operand_test(argument))
        case "$regex":
            return _regex_test(_make_regex(argument, siblings.get("$options")))
        case "$type":
            return _type_test(argument)
        case "$size":
            return _size_test(argument)
        case "$all":
            return _all_test(argument)
        case "$elemMatch":
            return _elem_match_test(argument)
    raise QueryError(2, f"unknown operator: {operator}")


def _negate(test: ValuesTest) -> ValuesTest:
    return lambda values: not test(values)


def _comparison_test(argument: Any, check: Callable[[int], bool]) -> ValuesTest:
    return lambda values: any(_compares(value, argument, check) for value in _expand(values))


def _compares(value: Any, argument: Any, check: Callable[[int], bool]) -> bool:
    # Comparisons never cross type brackets (only MinKey/MaxKey bound everything), and NaN
    # equals only NaN rather than sorting below the other numbers as it does in `compare`.
    if _bracket(value) != _bracket(argument) and not isinstance(argument, (MinKey, MaxKey)):
        return False
    if _is_nan(value) != _is_nan(argument):
        return False
    return check(compare(value, argument))


def _in_test(operator: str, argument: Any) -> ValuesTest:
    if not isinstance(argument, list):
        raise QueryError(2, f"{operator} needs an array")
    if any(_is_operator_object(item) for item in argument):
        raise QueryError(2, f"cannot nest $ under {operator}")
    tests = [_compile_condition(item) for item in argument]
    return lambda values: any(test(values) for test in tests)


def _not_operand_test(argument: Any) -> ValuesTest:
    if isinstance(argument, (Regex, re.Pattern)):
        return _regex_test(argument)
    if not isinstance(argument, dict):
        raise QueryError(2, "$not needs a regex or a document")
    if not argument:
        raise QueryError(2, "$not cannot be empty")
    return _compile_condition(argument)


def _make_regex(pattern: Any, options: Any) -> Regex[str]:
    """The regex of a `{$regex, $options}` pair; `$options` overrides a regex's own flags."""
    if isinstance(pattern, (Regex, re.Pattern)):
        pattern, flags = pattern.pattern, _regex_letters(pattern.flags)
    elif isinstance(pattern, str):
        flags = ""
    else:
        raise QueryError(2, "$regex has to be a string")
    if options is not None:
        if not isinstance(options, str):
            raise QueryError(2, "$options has to be a string")
        flags = options
    invalid = sorted(set(flags) - set("imsux"))
    if invalid:
        raise QueryError(51108, f"invalid flag in regex options: {invalid[0]}")
    return Regex(pattern, flags)


def _regex_test(regex: Regex[str] | re.Pattern[str]) -> ValuesTest:
    """Matches strings the regex finds a match in, and regex values equal to it."""
    if isinstance(regex, re.Pattern):
        compiled = regex
    else:
        try:
            compiled = re.compile(regex.pattern, regex.flags & _PY_REGEX_FLAGS)
        except re.error as exc:
            raise QueryError(51091, f"Regular expression is invalid: {exc}") from exc

    def test(values: list[Any]) -> bool:
        for value in _expand(values):
            bracket = _bracket(value)
            if bracket == _STRING and compiled.search(value):
                return True
            if bracket == _bracket(regex) and compare(value, regex) == 0:
                return True
        return False

    return test


def _type_code(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**31) <= value < 2**31:
        return 18  # bson encodes a Python int beyond int32 as a long
    return next((code for types, code, _ in _TYPES if isinstance(value, types)), None)


def _type_test(argument: Any) -> ValuesTest:
    wanted: set[int] = set()
    for alias in argument if isinstance(argument, list) else [argument]:
        if isinstance(alias, str):
            if alias not in _TYPE_ALIASES:
                raise QueryError(2, f"Unknown type name alias: {alias}")
            wanted |= _TYPE_ALIASES[alias]
        elif (code := _as_int(alias)) is not None and any(code == c for _, c, _ in _TYPES):
            wanted.add(code)
        else:
            raise QueryError(2, f"Invalid numerical type code: {alias!r}")
    return lambda values: any(_type_code(value) in wanted for value in _expand(values))


def _size_test(argument: Any) -> ValuesTest:
    size = _as_int(argument)
    if size is None or size < 0:
        raise QueryError(2, f"$size needs a non-negative integer, not {argument!r}")
    return lambda values: any(isinstance(value, list) and len(value) == size for value in values)


def _all_test(argument: Any) -> ValuesTest:
    if not isinstance(argument, list):
        raise QueryError(2, "$all needs an array")
    for item in argument:
        if _is_operator_object(item) and list(item) != ["$elemMatch"]:
            raise QueryError(2, "no $ expressions in $all")
    tests = [_compile_condition(item) for item in argument]
    return lambda values: bool(tests) and all(test(values) for test in tests)


def _elem_match_test(argument: Any) -> ValuesTest:
    """Some element of an array satisfies all of `argument` at once."""
    if not isinstance(argument, dict):
        raise QueryError(2, "$elemMatch needs an Object")

    def elements(values: list[Any]) -> Iterator[Any]:
        return (item for value in values if isinstance(value, list) for item in value)

    if _is_operator_object(argument) and not any(key in _LOGICAL for key in argument):
        test = _compile_condition(argument)
        return lambda values: any(test([item]) for item in elements(values))
    predicate = compile_filter(argument)
    return lambda values: any(
        isinstance(item, dict) and predicate(item) for item in elements(values)
    )


# ---------------------------------------------------------------------------------------------
# Updates


def apply_update(
    doc: Mapping[str, Any],
    update: Mapping[str, Any],
    *,
    inserting: bool = False,
    array_filters: list[Any] | None = None,
) -> Document:
    """The document that results from applying a replacement or operator `update` to `doc`
    (pipeline-style updates: `pipeline.update_document`).

    `inserting` is True for the insert half of an upsert (`doc` is then `upsert_seed(filter)`):
    it enables `$setOnInsert` and puts `_id` first, as MongoDB stores it. `array_filters`
    select the elements `$[identifier]` paths update.
    """
    if not isinstance(update, Mapping):
        raise QueryError(9, "Update argument must be either an object or an array")
    return id_first(_apply_document_update(doc, update, inserting, array_filters), inserting)


def id_first(doc: Document, inserting: bool) -> Document:
    """An upsert's inserted document with `_id` first, as MongoDB stores it."""
    if inserting and "_id" in doc:
        return {"_id": doc.pop("_id"), **doc}
    return doc


def _apply_document_update(
    doc: Mapping[str, Any],
    update: Mapping[str, Any],
    inserting: bool,
    array_filters: list[Any] | None,
) -> Document:
    dollar = [key.startswith("$") for key in update]
    if any(dollar) and not all(dollar):
        raise QueryError(9, _mixed_update_message(update))
    if update and all(dollar):
        result = _apply_operators(doc, update, inserting, _compile_array_filters(array_filters))
        _check_id_kept(doc, result)
        return result
    if array_filters:
        raise QueryError(2, "Cannot use array filters with a replacement document")
    if "_id" in update:
        _check_id_kept(doc, update)
    return _replace(doc, update)


def _mixed_update_message(update: Mapping[str, Any]) -> str:
    keys = list(update)
    if keys[0].startswith("$"):
        field = next(key for key in keys if not key.startswith("$"))
        return (
            f"Unknown modifier: {field}. Expected a valid update modifier or pipeline-style "
            "update specified as an array"
        )
    operator = next(key for key in keys if key.startswith("$"))
    return (
        f"The dollar ($) prefixed field '{operator}' in '{operator}' is not allowed in the "
        "context of an update's replacement document"
    )


def _check_id_kept(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    if "_id" in before and ("_id" not in after or compare(before["_id"], after["_id"]) != 0):
        raise QueryError(
            66, "Performing an update on the path '_id' would modify the immutable field '_id'"
        )


def _replace(doc: Mapping[str, Any], replacement: Mapping[str, Any]) -> Document:
    """The replacement document, keeping the original `_id` (first) if there was one."""
    id_source = doc if "_id" in doc else replacement
    result = {"_id": id_source["_id"]} if "_id" in id_source else {}
    result.update((key, value) for key, value in replacement.items() if key != "_id")
    return copy.deepcopy(result)


def _apply_operators(
    doc: Mapping[str, Any],
    update: Mapping[str, Any],
    inserting: bool,
    array_filters: dict[str, Predicate],
) -> Document:
    result = copy.deepcopy(dict(doc))
    actions = _parse_update(update)
    used = {part[2:-1] for _, parts, _ in actions for part in parts if _is_filtered(part)}
    for identifier in used - set(array_filters):
        raise QueryError(2, f"No array filter found for identifier '{identifier}'")
    for identifier in array_filters:
        if identifier not in used:
            raise QueryError(
                9, f"The array filter for identifier '{identifier}' was not used in the update"
            )
    for operator, parts, argument in actions:
        if operator == "$setOnInsert" and not inserting:
            continue
        for concrete in _array_paths(result, parts, array_filters):
            _UPDATERS[operator](result, concrete, copy.deepcopy(argument))
    return result


def _is_filtered(part: str) -> bool:
    """`$[identifier]`: the array elements the identifier's array filter selects."""
    return part.startswith("$[") and part.endswith("]") and len(part) > 3


def _compile_array_filters(array_filters: list[Any] | None) -> dict[str, Predicate]:
    """arrayFilters by identifier: each filter's fields all start with one identifier."""
    compiled: dict[str, Predicate] = {}
    for spec in array_filters or []:
        if not isinstance(spec, Mapping) or not spec:
            raise QueryError(2, "Cannot use an expression without a top-level field name in "
                                "arrayFilters")  # fmt: skip
        identifiers = {key.split(".", 1)[0] for key in spec}
        if len(identifiers) != 1:
            raise QueryError(9, f"Error parsing array filter :: caused by :: Expected a single "
                                f"top-level field name, found {sorted(identifiers)}")  # fmt: skip
        (identifier,) = identifiers
        if not re.fullmatch(r"[a-z][a-zA-Z0-9]*", identifier):
            raise QueryError(
                2, f"An array filter's top-level field name must be alphanumeric, beginning "
                f"with a lowercase letter, found '{identifier}'"
            )  # fmt: skip
        if identifier in compiled:
            raise QueryError(9, f"Found multiple array filters with the same top-level field "
                                f"name {identifier}")  # fmt: skip
        compiled[identifier] = _element_filter(compile_filter(spec), identifier)
    return compiled


def _element_filter(predicate: Predicate, identifier: str) -> Predicate:
    """An array filter on one element: its fields are paths under the identifier."""
    return lambda element: predicate({identifier: element})


def _array_paths(
    doc: Document, parts: list[str], array_filters: dict[str, Predicate]
) -> list[list[str]]:
    """`parts` with each `$[]` / `$[identifier]` replaced by the indexes it selects in `doc`:
    one concrete path per selected element (none when nothing is selected)."""
    paths: list[list[str]] = [[]]
    for position, part in enumerate(parts):
        if part != "$[]" and not _is_filtered(part):
            paths = [[*path, part] for path in paths]
            continue
        selected = []
        for path in paths:
            array: Any = doc
            for step in path:
                array = _child(array, step)
            if not isinstance(array, list):
                prefix = ".".join(parts[:position])
                raise QueryError(
                    2, f"The path '{prefix}' must exist in the document in order to apply "
                    "array updates."
                )  # fmt: skip
            select = array_filters[part[2:-1]] if part != "$[]" else None
            selected += [
                [*path, str(index)]
                for index, item in enumerate(array)
                if select is None or select(item)
            ]
        paths = selected
    return paths


def _parse_update(update: Mapping[str, Any]) -> list[tuple[str, list[str], Any]]:
    """Validated (operator, path parts, argument) actions in the order MongoDB applies them.

    For `$rename` the path is the destination and the argument the source's parts.
    """
    actions: list[tuple[str, list[str], Any]] = []
    touched: list[list[str]] = []
    for operator, fields in update.items():
        if operator not in _UPDATERS:
            raise QueryError(
                9,
                f"Unknown modifier: {operator}. Expected a valid update modifier or "
                "pipeline-style update specified as an array",
            )
        if not isinstance(fields, dict):
            raise QueryError(
                9,
                f"Modifiers operate on fields but we found type {_type_name(fields)} instead. "
                f"For example: {{$mod: {{<field>: ...}}}} not {{{operator}: {fields!r}}}",
            )
        for path, argument in fields.items():
            parts = _update_path(path)
            if operator == "$rename":
                touched.append(parts)
                parts, argument = _rename_target(path, argument), parts
            elif operator == "$inc" and not _is_number(argument):
                raise QueryError(
                    14, f"Cannot increment with non-numeric argument: {{{path}: {argument!r}}}"
                )
            elif operator == "$push":
                argument = _push_values(path, argument)
            touched.append(parts)
            actions.append((operator, parts, argument))
    conflict = _find_conflict(touched)
    if conflict:
        shorter, longer = conflict
        raise QueryError(40, f"Updating the path '{longer}' would create a conflict at '{shorter}'")
    # MongoDB 5.0+ applies updates in field-name order (array indexes numerically), which
    # decides the order in which new fields are appended.
    actions.sort(key=lambda action: _path_key(action[1]))
    return actions


def _update_path(path: str) -> list[str]:
    if not path:
        raise QueryError(56, "An empty update path is not valid.")
    parts = path.split(".")
    if "" in parts:
        raise QueryError(
            56, f"The update path '{path}' contains an empty field name, which is not allowed."
        )
    if any(part.startswith("$") and part != "$[]" and not _is_filtered(part) for part in parts):
        raise QueryError(2, f"positional and $-prefixed update paths are not supported: {path}")
    return parts


def _rename_target(source: str, target: Any) -> list[str]:
    if not isinstance(target, str):
        raise QueryError(2, f"The 'to' field for $rename must be a string: {source}: {target!r}")
    if target == source:
        raise QueryError(2, f"The source and target field for $rename must differ: {source}")
    return _update_path(target)


def _push_values(path: str, argument: Any) -> list[Any]:
    if not (isinstance(argument, dict) and "$each" in argument):
        return [argument]
    unsupported = [key for key in argument if key != "$each"]
    if unsupported:
        raise QueryError(2, f"unsupported $push modifier for '{path}': {unsupported[0]}")
    if not isinstance(argument["$each"], list):
        raise QueryError(2, f"The argument to $each in $push must be an array: {path}")
    return list(argument["$each"])


def _path_key(parts: list[str]) -> tuple[tuple[int, Any], ...]:
    return tuple((0, int(part)) if _is_index(part) else (1, part) for part in parts)


def _find_conflict(paths: list[list[str]]) -> tuple[str, str] | None:
    """Two paths of which one equals or contains the other, as dotted strings, or None."""
    ordered = sorted(paths, key=_path_key)
    # In path order a path is directly followed by its extensions, if it has any.
    for shorter, longer in itertools.pairwise(ordered):
        if longer[: len(shorter)] == shorter:
            return ".".join(shorter), ".".join(longer)
    return None


def _child(container: Any, part: str) -> Any:
    """The value at one path part of a document or (by index) array, or `_MISSING`."""
    if isinstance(container, dict):
        return container.get(part, _MISSING)
    if isinstance(container, list) and _is_index(part) and int(part) < len(container):
        return container[int(part)]
    return _MISSING


def _put(container: dict[str, Any] | list[Any], part: str, value: Any) -> None:
    """Set one part: existing fields keep their position, new ones are appended."""
    if isinstance(container, dict):
        container[part] = value
        return
    if not _is_index(part):
        raise QueryError(28, f"Cannot create field '{part}' in element {container!r}")
    index = int(part)
    container.extend([None] * (index + 1 - len(container)))  # MongoDB pads arrays with nulls
    container[index] = value


def _parent_creating(doc: Document, parts: list[str]) -> dict[str, Any] | list[Any]:
    """The container of the path's last part, creating missing embedded documents."""
    container: Any = doc
    for position, part in enumerate(parts[:-1]):
        child = _child(container, part)
        if child is _MISSING:
            child = {}
            _put(container, part, child)
        elif not isinstance(child, (dict, list)):
            raise QueryError(
                28, f"Cannot create field '{parts[position + 1]}' in element {{{part}: {child!r}}}"
            )
        container = child
    return container


def _containers(doc: Document, parts: list[str]) -> list[Any]:
    """The existing containers along the path, from `doc` to (at best) the last part's parent."""
    found: list[Any] = [doc]
    for part in parts[:-1]:
        child = _child(found[-1], part)
        if not isinstance(child, (dict, list)):
            break
        found.append(child)
    return found


def _set(doc: Document, parts: list[str], value: Any) -> None:
    _put(_parent_creating(doc, parts), parts[-1], value)


def _unset(doc: Document, parts: list[str], _: Any = None) -> None:
    found = _containers(doc, parts)
    if len(found) < len(parts):
        return
    parent, key = found[-1], parts[-1]
    if isinstance(parent, dict):
        parent.pop(key, None)
    elif _child(parent, key) is not _MISSING:
        parent[int(key)] = None  # unsetting an array element leaves a null, as in MongoDB


def _inc(doc: Document, parts: list[str], amount: Any) -> None:
    parent = _parent_creating(doc, parts)
    current = _child(parent, parts[-1])
    if current is _MISSING:
        _put(parent, parts[-1], amount)
    elif not _is_number(current):
        raise QueryError(
            14,
            f"Cannot apply $inc to a value of non-numeric type. {{_id: {doc.get('_id')!r}}} "
            f"has the field '{parts[-1]}' of non-numeric type {_type_name(current)}",
        )
    else:
        _put(parent, parts[-1], _add(current, amount))


def _set_if(better: Callable[[int], bool]) -> Callable[[Document, list[str], Any], None]:
    """An updater setting the value when the field is missing or `better(compare(new, old))`."""

    def update(doc: Document, parts: list[str], value: Any) -> None:
        parent = _parent_creating(doc, parts)
        current = _child(parent, parts[-1])
        if current is _MISSING or better(compare(value, current)):
            _put(parent, parts[-1], value)

    return update


def _push(doc: Document, parts: list[str], values: list[Any]) -> None:
    parent = _parent_creating(doc, parts)
    current = _child(parent, parts[-1])
    if current is _MISSING:
        _put(parent, parts[-1], values)
    elif isinstance(current, list):
        current.extend(values)
    else:
        raise QueryError(
            2,
            f"The field '{'.'.join(parts)}' must be an array but is of type "
            f"{_type_name(current)} in document {{_id: {doc.get('_id')!r}}}",
        )


def _rename(doc: Document, target: list[str], source: list[str]) -> None:
    found = _containers(doc, source)
    if len(found) < len(source) or _child(found[-1], source[-1]) is _MISSING:
        return
    for role, parts in (("source", source), ("destination", target)):
        if any(isinstance(container, list) for container in _containers(doc, parts)):
            raise QueryError(2, f"The {role} field cannot be an array element: {'.'.join(parts)}")
    value = _child(found[-1], source[-1])
    _unset(doc, source)
    _set(doc, target, value)


_UPDATERS: dict[str, Callable[[Document, list[str], Any], None]] = {
    "$set": _set,
    "$setOnInsert": _set,
    "$unset": _unset,
    "$inc": _inc,
    "$min": _set_if(lambda order: order < 0),
    "$max": _set_if(lambda order: order > 0),
    "$push": _push,
    "$rename": _rename,
}


def upsert_seed(filter: Mapping[str, Any]) -> Document:
    """The document an upsert inserts before applying its update: the filter's equalities."""
    compile_filter(filter)  # reject malformed filters like the query would
    equalities = list(_equalities(filter))
    conflict = _find_conflict([path.split(".") for path, _ in equalities])
    if conflict:
        raise QueryError(
            54, f"cannot infer query fields to set, path '{conflict[0]}' is matched twice"
        )
    seed: Document = {}
    for path, value in equalities:
        *parents, last = path.split(".")
        container = seed
        for part in parents:
            container = container.setdefault(part, {})
        container[last] = copy.deepcopy(value)
    return seed


def _equalities(filter: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for key, condition in filter.items():
        # A one-clause $or is just its clause, as MongoDB's optimizer sees it.
        if key == "$and" or (key == "$or" and len(condition) == 1):
            for clause in condition:
                yield from _equalities(clause)
        elif key.startswith("$"):
            continue
        elif _is_operator_object(condition):
            if "$eq" in condition:
                yield key, condition["$eq"]
        elif not isinstance(condition, (Regex, re.Pattern)):
            yield key, condition


# ---------------------------------------------------------------------------------------------
# Projection and sort

ProjectionTree = dict[str, Any]  # field name -> True (the whole field) or a nested tree


def project(doc: Mapping[str, Any], projection: Mapping[str, Any] | None) -> Document:
    """`doc` with an inclusion or exclusion `projection` applied (None or {} keeps it all)."""
    return _compile_projection(projection)(doc)


def _compile_projection(
    projection: Mapping[str, Any] | None,
) -> Callable[[Mapping[str, Any]], Document]:
    if not projection:
        return lambda doc: copy.deepcopy(dict(doc))
    keep_id = True
    fields: dict[str, bool] = {}
    for path, flag in projection.items():
        if not path or path.startswith("$") or ".$" in path:
            raise QueryError(2, f"unsupported projection path: '{path}'")
        if _bracket(flag) not in (_NUMBER, _BOOL):
            raise QueryError(2, f"unsupported projection value for '{path}': {flag!r}")
        if path == "_id":
            keep_id = _truthy(flag)
        else:
            fields[path] = _truthy(flag)
    inclusive = next(iter(fields.values()), keep_id)
    for path, included in fields.items():
        if included != inclusive:
            mode, kind = ("inclusion", "exclusion") if inclusive else ("exclusion", "inclusion")
            raise QueryError(2, f"Cannot do {kind} on field {path} in {mode} projection")
    if keep_id == inclusive:
        fields["_id"] = keep_id
    tree = _projection_tree(list(fields))
    if inclusive:
        return lambda doc: copy.deepcopy(_include(doc, tree))
    return lambda doc: copy.deepcopy(_exclude(doc, tree))


def _projection_tree(paths: list[str]) -> ProjectionTree:
    tree: ProjectionTree = {}
    for path in paths:
        *parents, last = path.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
            if node is True:
                raise QueryError(31250, f"Path collision at {path}")
        if last in node:
            raise QueryError(31250, f"Path collision at {path}")
        node[last] = True
    return tree


def _include(doc: Mapping[str, Any], tree: ProjectionTree) -> Document:
    """Only the fields in `tree`, in the document's own order."""
    result: Document = {}
    for key, value in doc.items():
        subtree = tree.get(key)
        if subtree is True:
            result[key] = value
        elif subtree is not None:
            kept = _include_nested(value, subtree)
            if kept is not _MISSING:
                result[key] = kept
    return result


def _include_nested(value: Any, tree: ProjectionTree) -> Any:
    # Scalars have no sub-fields to include; arrays keep only their (projected) documents.
    if isinstance(value, dict):
        return _include(value, tree)
    if isinstance(value, list):
        kept = (_include_nested(item, tree) for item in value)
        return [item for item in kept if item is not _MISSING]
    return _MISSING


def _exclude(value: Any, tree: ProjectionTree) -> Any:
    """`value` without the fields in `tree`, applied to each element of arrays."""
    if isinstance(value, list):
        return [_exclude(item, tree) for item in value]
    if not isinstance(value, dict):
        return value
    result: Document = {}
    for key, item in value.items():
        subtree = tree.get(key)
        if subtree is not True:
            result[key] = item if subtree is None else _exclude(item, subtree)
    return result


def sort_documents(docs: Iterable[Document], sort_spec: Mapping[str, Any]) -> list[Document]:
    """`docs` stably sorted by `sort_spec` ({path: 1 | -1}); the documents are not copied."""
    fields = _parse_sort(sort_spec)
    keyed = [
        ([_sort_key(doc, parts, direction < 0) for parts, direction in fields], doc) for doc in docs
    ]

    def order(left: tuple[list[Any], Any], right: tuple[list[Any], Any]) -> int:
        for key_a, key_b, (_, direction) in zip(left[0], right[0], fields, strict=True):
            result = _sign(key_a[0], key_b[0]) or compare(key_a[1], key_b[1])
            if result:
                return result * direction
        return 0

    keyed.sort(key=cmp_to_key(order))
    return [doc for _, doc in keyed]


def _parse_sort(sort_spec: Mapping[str, Any]) -> list[tuple[list[str], int]]:
    if not isinstance(sort_spec, Mapping):
        raise QueryError(2, "sort specification must be an object")
    fields = []
    for path, value in sort_spec.items():
        direction = _as_int(value)
        if direction not in (1, -1):
            raise QueryError(
                2, "$sort key ordering must be 1 (for ascending) or -1 (for descending)"
            )
        fields.append((path.split("."), direction))
    return fields


def _sort_key(doc: Mapping[str, Any], parts: list[str], descending: bool) -> tuple[int, Any]:
    """(rank, value): arrays sort by their least (or, descending, greatest) element and a
    missing field as null; an empty array sorts before null (rank 0), as in MongoDB."""
    values = [
        item
        for found in _resolve(doc, parts)
        for item in (found if isinstance(found, list) else [found])
    ]
    if not values:
        return (0, None)
    return (1, (max if descending else min)(values, key=_BSON_KEY))
