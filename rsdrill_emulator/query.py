"""MongoDB query semantics on plain documents: matching (filters) and distinct values; updates
are `update`, projection and sort `projection`.

Documents are dicts as decoded by `bson.decode` with the default codec. Everything here is pure:
no I/O, no state, arguments are never mutated and returned documents share nothing with them.
Filters and projections are parsed before any document is looked at, so a malformed one raises
`QueryError` even when there is nothing to match. The values it compares are `values`; the
expression language (`$expr`) is `expressions`; aggregation and pipeline-style updates are
`pipeline`, which builds on this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.regex import Regex

from rsdrill_emulator.expressions import compile_expression, or_null
from rsdrill_emulator.values import (
    _MISSING,
    _STRING,
    _TYPES,
    QueryError,
    _as_int,
    _bracket,
    _is_nan,
    _is_operator_object,
    _regex_letters,
    _truthy,
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
