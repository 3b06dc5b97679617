"""MongoDB update semantics on plain documents: update operators ($set, $inc, $push, ... with
array filters and positional paths), replacements and the document an upsert starts from.

Pure, as `query`: arguments are never mutated and returned documents share nothing with them."""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bson.regex import Regex

from rsdrill_emulator.query import Document, Predicate, _is_index, compile_filter
from rsdrill_emulator.values import (
    _MISSING,
    QueryError,
    _add,
    _is_number,
    _is_operator_object,
    _type_name,
    compare,
)


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
