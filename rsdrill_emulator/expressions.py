"""MongoDB's aggregation expression language, compiled once and evaluated per document.

An expression is a field path (`"$a.b"`), a variable (`"$$ROOT"`, `"$$x"` from a command's
`let`), an operator object (`{$eq: [...]}`), an object or array of expressions, or a constant.
Used by `$expr` in filters, by aggregation stages and by pipeline-style updates. Pure: no I/O,
documents are never mutated.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from bson.int64 import Int64

from rsdrill_emulator.values import (
    _MISSING,
    QueryError,
    _add,
    _is_number,
    _is_operator_object,
    _to_number,
    _truthy,
    _type_name,
    compare,
)

Variables = Mapping[str, Any]
# Evaluates an expression against the current document, with the variables in scope.
Expression = Callable[[Any, Variables], Any]

MISSING: Any = _MISSING
# Variables every expression sees; `$$REMOVE` evaluates to a missing value.
_SYSTEM_VARIABLES = frozenset({"ROOT", "CURRENT", "REMOVE", "NOW"})


def compile_expression(expression: Any) -> Expression:
    """Parse `expression` once; raises QueryError for unknown operators or bad arguments."""
    if isinstance(expression, str) and expression.startswith("$$"):
        return _compile_variable(expression[2:])
    if isinstance(expression, str) and expression.startswith("$"):
        parts = _path_parts(expression[1:], expression)
        return lambda doc, variables: field_path_value(doc, parts)
    if _is_operator_object(expression):
        if len(expression) != 1:
            raise QueryError(
                15983, f"an expression specification must contain exactly one field: {expression}"
            )
        ((name, argument),) = expression.items()
        if name not in _OPERATORS:
            raise QueryError(168, f"Unrecognized expression '{name}'")
        return _OPERATORS[name](argument)
    if isinstance(expression, dict):
        fields = {key: compile_expression(value) for key, value in expression.items()}
        return lambda doc, variables: {
            key: value
            for key, evaluate in fields.items()
            if (value := evaluate(doc, variables)) is not MISSING
        }
    if isinstance(expression, list):
        items = [compile_expression(item) for item in expression]
        return lambda doc, variables: [or_null(evaluate(doc, variables)) for evaluate in items]
    return lambda doc, variables: expression


def evaluate_let(let: Any) -> dict[str, Any]:
    """A command's `let` document as variable values (each a constant expression)."""
    if let is None:
        return {}
    if not isinstance(let, Mapping):
        raise QueryError(14, "'let' must be an object")
    values = {}
    for name, expression in let.items():
        if not name or not name[0].islower() or name in _SYSTEM_VARIABLES:
            raise QueryError(
                16867, f"'{name}' starts with an invalid character for a user variable name"
            )
        values[name] = or_null(compile_expression(expression)({}, {}))
    return values


def or_null(value: Any) -> Any:
    return None if value is MISSING else value


def field_path_value(value: Any, parts: list[str]) -> Any:
    """An aggregation field path: through an array it yields the array of found values."""
    for position, part in enumerate(parts):
        if isinstance(value, list):
            found = (field_path_value(item, parts[position:]) for item in value)
            return [item for item in found if item is not MISSING]
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def _path_parts(path: str, shown: str) -> list[str]:
    parts = path.split(".")
    if "" in parts:
        raise QueryError(15998, f"FieldPath field names may not be empty strings: '{shown}'")
    return parts


def _compile_variable(reference: str) -> Expression:
    name, *parts = reference.split(".")
    if not name:
        raise QueryError(9, "empty variable names are not allowed")

    def value_of(doc: Any, variables: Variables) -> Any:
        if name in ("ROOT", "CURRENT"):
            base = doc
        elif name == "REMOVE":
            return MISSING
        elif name == "NOW":
            base = datetime.now(UTC)
        elif name in variables:
            base = variables[name]
        else:
            raise QueryError(17276, f"Use of undefined variable: {name}")
        return field_path_value(base, parts) if parts else base

    return value_of


# -- operators --------------------------------------------------------------------------------

Operator = Callable[[Any], Expression]


def _arguments(name: str, argument: Any, count: int | None = None) -> list[Expression]:
    items = argument if isinstance(argument, list) else [argument]
    if count is not None and len(items) != count:
        raise QueryError(
            16020, f"Expression {name} takes exactly {count} arguments, {len(items)} were passed"
        )
    return [compile_expression(item) for item in items]


def _comparison(name: str, check: Callable[[int], bool]) -> Operator:
    def build(argument: Any) -> Expression:
        left, right = _arguments(name, argument, 2)
        return lambda doc, v: check(compare(or_null(left(doc, v)), or_null(right(doc, v))))

    return build


def _cmp(argument: Any) -> Expression:
    left, right = _arguments("$cmp", argument, 2)
    return lambda doc, v: compare(or_null(left(doc, v)), or_null(right(doc, v)))


def _and(argument: Any) -> Expression:
    items = _arguments("$and", argument)
    return lambda doc, v: all(_truthy(or_null(item(doc, v))) for item in items)


def _or(argument: Any) -> Expression:
    items = _arguments("$or", argument)
    return lambda doc, v: any(_truthy(or_null(item(doc, v))) for item in items)


def _not(argument: Any) -> Expression:
    (item,) = _arguments("$not", argument, 1)
    return lambda doc, v: not _truthy(or_null(item(doc, v)))


def _numbers(name: str, values: list[Any]) -> list[Any] | None:
    """The operands of an arithmetic operator, or None when one is null or missing."""
    if any(or_null(value) is None for value in values):
        return None
    for value in values:
        if not _is_number(value):
            raise QueryError(14, f"{name} only supports numeric types, not {_type_name(value)}")
    return values


def _sum_of(argument: Any) -> Expression:
    items = _arguments("$add", argument)

    def evaluate(doc: Any, v: Variables) -> Any:
        values = _numbers("$add", [item(doc, v) for item in items])
        if values is None:
            return None
        total: Any = 0
        for value in values:
            total = _add(total, value)
        return total

    return evaluate


def _subtract(argument: Any) -> Expression:
    left, right = _arguments("$subtract", argument, 2)

    def evaluate(doc: Any, v: Variables) -> Any:
        values = _numbers("$subtract", [left(doc, v), right(doc, v)])
        if values is None:
            return None
        negated = -_to_number(values[1])
        return _add(values[0], Int64(negated) if isinstance(values[1], Int64) else negated)

    return evaluate


def _multiply(argument: Any) -> Expression:
    items = _arguments("$multiply", argument)

    def evaluate(doc: Any, v: Variables) -> Any:
        values = _numbers("$multiply", [item(doc, v) for item in items])
        if values is None:
            return None
        product: Any = 1
        for value in values:
            product = product * _to_number(value)
        return product

    return evaluate


def _concat(argument: Any) -> Expression:
    items = _arguments("$concat", argument)

    def evaluate(doc: Any, v: Variables) -> Any:
        values = [or_null(item(doc, v)) for item in items]
        if any(value is None for value in values):
            return None
        for value in values:
            if not isinstance(value, str):
                raise QueryError(16702, f"$concat only supports strings, not {_type_name(value)}")
        return "".join(values)

    return evaluate


def _literal(argument: Any) -> Expression:
    return lambda doc, v: argument


def _if_null(argument: Any) -> Expression:
    items = _arguments("$ifNull", argument)
    if len(items) < 2:
        raise QueryError(1257300, "$ifNull needs at least two arguments")

    def evaluate(doc: Any, v: Variables) -> Any:
        for item in items[:-1]:
            value = or_null(item(doc, v))
            if value is not None:
                return value
        return items[-1](doc, v)

    return evaluate


def _cond(argument: Any) -> Expression:
    if isinstance(argument, dict):
        if set(argument) != {"if", "then", "else"}:
            raise QueryError(17080, "$cond needs if, then and else")
        argument = [argument["if"], argument["then"], argument["else"]]
    condition, then, otherwise = _arguments("$cond", argument, 3)
    return lambda doc, v: then(doc, v) if _truthy(or_null(condition(doc, v))) else otherwise(doc, v)


def _in(argument: Any) -> Expression:
    needle, haystack = _arguments("$in", argument, 2)

    def evaluate(doc: Any, v: Variables) -> bool:
        items = haystack(doc, v)
        if not isinstance(items, list):
            raise QueryError(40081, f"$in requires an array as a second argument, found: "
                                    f"{_type_name(or_null(items))}")  # fmt: skip
        value = or_null(needle(doc, v))
        return any(compare(value, item) == 0 for item in items)

    return evaluate


def _size(argument: Any) -> Expression:
    (item,) = _arguments("$size", argument, 1)

    def evaluate(doc: Any, v: Variables) -> int:
        value = item(doc, v)
        if not isinstance(value, list):
            raise QueryError(
                17124, f"The argument to $size must be an array. Type: {_type_name(or_null(value))}"
            )
        return len(value)

    return evaluate


def _type(argument: Any) -> Expression:
    (item,) = _arguments("$type", argument, 1)
    return lambda doc, v: "missing" if (value := item(doc, v)) is MISSING else _type_name(value)


def _rand(argument: Any) -> Expression:
    if argument != {}:
        raise QueryError(3040501, "$rand does not currently accept arguments")
    return lambda doc, v: random.random()


def _field_name(name: str, argument: Any) -> Expression:
    """The `field` of $getField/$setField: it must be a constant string."""
    field = argument.get("field", MISSING)
    if isinstance(field, dict) and list(field) == ["$literal"]:
        field = field["$literal"]  # the only way to name a field that starts with '$'
    elif isinstance(field, str) and field.startswith("$"):
        field = MISSING
    if not isinstance(field, str):
        raise QueryError(4161106, f"{name} requires 'field' to evaluate to a constant string")
    return lambda doc, v: field


def _object_argument(name: str, argument: Any, allowed: set[str]) -> None:
    if not isinstance(argument, dict) or "field" not in argument or set(argument) - allowed:
        raise QueryError(4161101, f"{name} needs an object with {sorted(allowed)}")


def _get_field(argument: Any) -> Expression:
    if not isinstance(argument, dict):
        argument = {"field": argument}
    _object_argument("$getField", argument, {"field", "input"})
    field = _field_name("$getField", argument)
    source = compile_expression(argument.get("input", "$$CURRENT"))

    def evaluate(doc: Any, v: Variables) -> Any:
        value = source(doc, v)
        return value.get(field(doc, v), MISSING) if isinstance(value, dict) else MISSING

    return evaluate


def _set_field(argument: Any, unset: bool = False) -> Expression:
    """$setField (and $unsetField): the one way to name a field with `.` or a leading `$`."""
    name = "$unsetField" if unset else "$setField"
    allowed = {"field", "input"} if unset else {"field", "input", "value"}
    _object_argument(name, argument, allowed)
    if not unset and "value" not in argument:
        raise QueryError(4161103, "$setField requires 'value' to be specified")
    field = _field_name(name, argument)
    source = compile_expression(argument.get("input", MISSING))
    value = compile_expression(argument.get("value"))

    def evaluate(doc: Any, v: Variables) -> Any:
        target = source(doc, v)
        if or_null(target) is None:
            return None
        if not isinstance(target, dict):
            raise QueryError(4161105, f"{name} requires 'input' to evaluate to type Object")
        result = dict(target)
        key = field(doc, v)
        new = MISSING if unset else value(doc, v)
        if new is MISSING:
            result.pop(key, None)
        else:
            result[key] = new
        return result

    return evaluate


def _merge_objects(argument: Any) -> Expression:
    items = _arguments("$mergeObjects", argument)

    def evaluate(doc: Any, v: Variables) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for item in items:
            value = or_null(item(doc, v))
            if value is None:
                continue
            if not isinstance(value, dict):
                raise QueryError(40400, f"$mergeObjects requires object inputs, but input "
                                        f"{value!r} is of type {_type_name(value)}")  # fmt: skip
            merged.update(value)
        return merged

    return evaluate


_OPERATORS: dict[str, Operator] = {
    "$literal": _literal,
    "$eq": _comparison("$eq", lambda order: order == 0),
    "$ne": _comparison("$ne", lambda order: order != 0),
    "$gt": _comparison("$gt", lambda order: order > 0),
    "$gte": _comparison("$gte", lambda order: order >= 0),
    "$lt": _comparison("$lt", lambda order: order < 0),
    "$lte": _comparison("$lte", lambda order: order <= 0),
    "$cmp": _cmp,
    "$and": _and,
    "$or": _or,
    "$not": _not,
    "$add": _sum_of,
    "$subtract": _subtract,
    "$multiply": _multiply,
    "$concat": _concat,
    "$ifNull": _if_null,
    "$cond": _cond,
    "$in": _in,
    "$size": _size,
    "$type": _type,
    "$rand": _rand,
    "$getField": _get_field,
    "$setField": _set_field,
    "$unsetField": lambda argument: _set_field(argument, unset=True),
    "$mergeObjects": _merge_objects,
}
