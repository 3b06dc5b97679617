"""Aggregation pipelines on plain documents: the stages, pipeline-style updates, and what the
`$out` / `$merge` stages would write.

Pure like `query`: stages take documents and return new ones; where a stage writes (`$out`,
`$merge`) this module only works out the writes and the caller performs them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import localcontext
from typing import Any

from bson.decimal128 import Decimal128, create_decimal128_context

from rsdrill_emulator.expressions import (
    MISSING,
    Expression,
    Variables,
    compile_expression,
    or_null,
)
from rsdrill_emulator.projection import _compile_projection, sort_documents
from rsdrill_emulator.query import compile_filter
from rsdrill_emulator.updates import _check_id_kept, _unset, _update_path, apply_update, id_first
from rsdrill_emulator.values import (
    _BSON_KEY,
    QueryError,
    _add,
    _as_int,
    _bracket,
    _is_number,
    _truthy,
    compare,
)

Document = dict[str, Any]
Stage = Callable[[list[Any], Any, Variables], list[Any]]

# Stages that write their input somewhere; only ever last in a pipeline.
OUTPUT_STAGES = ("$out", "$merge")
# Stages a pipeline-style update may use (MongoDB's list).
_UPDATE_STAGES = frozenset(
    {"$addFields", "$set", "$project", "$unset", "$replaceRoot", "$replaceWith"}
)


def run_pipeline(
    docs: Iterable[Document], pipeline: list[Any], variables: Variables | None = None
) -> list[Document]:
    """The result of an aggregation `pipeline` over `docs` (new documents); `variables` are
    the command's `let` values."""
    results: list[Any] = list(docs)
    for name, spec in parse_pipeline(pipeline):
        if name in OUTPUT_STAGES or name in _SOURCE_STAGES:
            raise QueryError(40602, f"{name} is only valid as the last or first stage")
        results = _STAGES[name](results, spec, variables or {})
    return copy.deepcopy(results)


def parse_pipeline(pipeline: Any) -> list[tuple[str, Any]]:
    """(stage name, specification) pairs, checked for shape and known names."""
    if not isinstance(pipeline, list):
        raise QueryError(14, "'pipeline' option must be specified as an array")
    stages = []
    for position, stage in enumerate(pipeline):
        if not isinstance(stage, dict) or len(stage) != 1:
            raise QueryError(
                40323, "A pipeline stage specification object must contain exactly one field."
            )
        ((name, spec),) = stage.items()
        if name not in _STAGES and name not in OUTPUT_STAGES and name not in _SOURCE_STAGES:
            raise QueryError(40324, f"Unrecognized pipeline stage name: '{name}'")
        if name in OUTPUT_STAGES and position != len(pipeline) - 1:
            raise QueryError(40601, f"{name} can only be the final stage in the pipeline")
        stages.append((name, spec))
    return stages


def apply_update_pipeline(
    doc: Mapping[str, Any], pipeline: Any, variables: Variables | None = None
) -> Document:
    """The document a pipeline-style update (an array of stages) makes of `doc`."""
    stages = parse_pipeline(pipeline)
    for name, _ in stages:
        if name not in _UPDATE_STAGES:
            raise QueryError(
                72,
                f"{name} is not allowed to be used within an update",
            )
    results: list[Any] = [copy.deepcopy(dict(doc))]
    for name, spec in stages:
        results = _STAGES[name](results, spec, variables or {})
    (result,) = results
    if "_id" in doc and "_id" not in result:
        result["_id"] = copy.deepcopy(doc["_id"])  # as for a replacement: the _id stays
    _check_id_kept(doc, result)
    if "_id" in doc and next(iter(result), None) != "_id":
        result = {"_id": result.pop("_id"), **result}
    return result


# -- stages -----------------------------------------------------------------------------------


def _match_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    predicate = compile_filter(spec, variables)
    return [doc for doc in docs if predicate(doc)]


def _sort_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    if not spec:
        raise QueryError(15976, "$sort stage must have at least one sort key")
    return sort_documents(docs, spec)


def _skip_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    count = _as_int(spec)
    if count is None or count < 0:
        raise QueryError(15956, f"invalid argument to $skip stage: {spec!r}")
    return docs[count:]


def _limit_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    count = _as_int(spec)
    if count is None or count <= 0:
        raise QueryError(15958, f"the limit must be positive, not {spec!r}")
    return docs[:count]


def _count_stage(docs: list[Any], field: Any, variables: Variables) -> list[Any]:
    if not isinstance(field, str) or not field or field.startswith("$") or "." in field:
        raise QueryError(
            40156, f"the count field must be a non-empty string without '$' or '.': {field!r}"
        )
    return [{field: len(docs)}] if docs else []  # like MongoDB: no document when nothing counted


def _is_flag(value: Any) -> bool:
    return _bracket(value) in (10, 40)  # a number or a bool: include/exclude, not an expression


def _project_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    """Inclusion/exclusion as in find, plus computed fields (any other value is an expression)."""
    if not isinstance(spec, dict) or not spec:
        raise QueryError(2, "$project requires at least one output field")
    flags = {path: flag for path, flag in spec.items() if _is_flag(flag)}
    computed = {path: value for path, value in spec.items() if not _is_flag(value)}
    if computed and any(not _truthy(flag) for path, flag in flags.items() if path != "_id"):
        raise QueryError(31254, "Cannot do exclusion in an inclusion projection")
    if computed and not any(_truthy(flag) for path, flag in flags.items() if path != "_id"):
        # Only computed fields (and perhaps _id): an inclusion projection of nothing else.
        flags = {"_id": flags.get("_id", True), **{p: True for p in computed}}
    project = _compile_projection(flags)
    add = _compile_fields(computed)
    return [add(project(doc), doc, variables) for doc in docs]


FieldsSetter = Callable[[Document, Document, Variables], Document]


def _compile_fields(spec: Mapping[str, Any]) -> FieldsSetter:
    """Sets each (dotted) field of `spec` to its expression's value, evaluated on the input
    document; a value that evaluates to missing (`$$REMOVE`) removes the field."""
    fields = []
    for path, expression in spec.items():
        parts = _update_path(path)
        fields.append((parts, compile_expression(expression)))

    def apply(target: Document, source: Document, variables: Variables) -> Document:
        for parts, evaluate in fields:
            value = evaluate(source, variables)
            if value is MISSING:
                _unset(target, parts)
            else:
                _set_creating(target, parts, copy.deepcopy(value))
        return target

    return apply


def _set_creating(doc: Document, parts: list[str], value: Any) -> None:
    container = doc
    for part in parts[:-1]:
        child = container.get(part)
        if not isinstance(child, dict):
            child = {}
            container[part] = child
        container = child
    container[parts[-1]] = value


def _add_fields_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    if not isinstance(spec, dict):
        raise QueryError(40272, "$addFields specification stage must be an object")
    add = _compile_fields(spec)
    return [add(copy.deepcopy(doc), doc, variables) for doc in docs]


def _unset_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    paths = [spec] if isinstance(spec, str) else spec
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise QueryError(31002, "$unset specification must be a string or an array of strings")
    return _project_stage(docs, dict.fromkeys(paths, 0), variables)


def _replace_root_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    if not isinstance(spec, dict) or set(spec) != {"newRoot"}:
        raise QueryError(40231, "$replaceRoot requires exactly one field, 'newRoot'")
    return _replace_with_stage(docs, spec["newRoot"], variables)


def _replace_with_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    new_root = compile_expression(spec)
    results = []
    for doc in docs:
        value = new_root(doc, variables)
        if not isinstance(value, dict):
            raise QueryError(
                40228, f"'newRoot' expression must evaluate to an object, but resulting value "
                f"was: {or_null(value)!r}"
            )  # fmt: skip
        results.append(value)
    return results


def _group_stage(docs: list[Any], spec: Any, variables: Variables) -> list[Any]:
    """One document per distinct `_id` value, in `_id` order (MongoDB leaves it unspecified)."""
    if not isinstance(spec, dict) or "_id" not in spec:
        raise QueryError(15955, "a group specification must include an _id")
    key_of = compile_expression(spec["_id"])
    accumulators = [
        (name, *_parse_accumulator(name, accumulator))
        for name, accumulator in spec.items()
        if name != "_id"
    ]
    keyed = sorted(
        ((or_null(key_of(doc, variables)), doc) for doc in docs), key=lambda kd: _BSON_KEY(kd[0])
    )
    groups: list[tuple[Any, list[Any]]] = []
    for key, doc in keyed:
        if groups and compare(groups[-1][0], key) == 0:
            groups[-1][1].append(doc)
        else:
            groups.append((key, [doc]))
    return [
        {"_id": key}
        | {
            name: reduce([expr(doc, variables) for doc in members])
            for name, reduce, expr in accumulators
        }
        for key, members in groups
    ]


def _parse_accumulator(name: str, spec: Any) -> tuple[Callable[[list[Any]], Any], Expression]:
    if "." in name:
        raise QueryError(40235, f"The field name '{name}' cannot contain '.'")
    if not isinstance(spec, dict):
        raise QueryError(40234, f"The field '{name}' must be an accumulator object")
    if len(spec) != 1:
        raise QueryError(40238, f"The field '{name}' must specify one accumulator")
    ((operator, expression),) = spec.items()
    if operator not in _ACCUMULATORS:
        raise QueryError(15952, f"unknown group operator '{operator}'")
    return _ACCUMULATORS[operator], compile_expression(expression)


def _sum(values: list[Any]) -> Any:
    total: Any = 0
    for value in values:
        if _is_number(value):
            total = _add(total, value)
    return total


def _avg(values: list[Any]) -> Any:
    numbers = [value for value in values if _is_number(value)]
    if not numbers:
        return None
    total = _sum(numbers)
    if isinstance(total, Decimal128):
        with localcontext(create_decimal128_context()):
            return Decimal128(total.to_decimal() / len(numbers))
    return float(total) / len(numbers)


def _extreme(pick: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    """$min/$max: the least/greatest non-null value in BSON order, or null."""

    def accumulate(values: list[Any]) -> Any:
        present = [value for value in values if or_null(value) is not None]
        return pick(present, key=_BSON_KEY) if present else None

    return accumulate


_ACCUMULATORS: dict[str, Callable[[list[Any]], Any]] = {
    "$sum": _sum,
    "$avg": _avg,
    "$min": _extreme(min),
    "$max": _extreme(max),
    "$first": lambda values: or_null(values[0]),
    "$last": lambda values: or_null(values[-1]),
    "$push": lambda values: [value for value in values if value is not MISSING],
}
_STAGES: dict[str, Stage] = {
    "$match": _match_stage,
    "$group": _group_stage,
    "$count": _count_stage,
    "$sort": _sort_stage,
    "$skip": _skip_stage,
    "$limit": _limit_stage,
    "$project": _project_stage,
    "$addFields": _add_fields_stage,
    "$set": _add_fields_stage,
    "$unset": _unset_stage,
    "$replaceRoot": _replace_root_stage,
    "$replaceWith": _replace_with_stage,
}
# Stages that produce documents instead of reading the collection; only ever first, and
# answered by the caller (they need the server: sessions, operations).
_SOURCE_STAGES = frozenset({"$documents", "$listLocalSessions", "$currentOp", "$changeStream"})


def source_stage(pipeline: list[Any]) -> tuple[str, Any] | None:
    """The first stage when it is a source stage (`$documents`, `$listLocalSessions`, ...)."""
    stages = parse_pipeline(pipeline)
    if stages and stages[0][0] in _SOURCE_STAGES:
        return stages[0]
    return None


def documents_stage(spec: Any, variables: Variables) -> list[Document]:
    """`$documents`: the documents its expression evaluates to."""
    value = compile_expression(spec)({}, variables)
    if not isinstance(value, list) or not all(isinstance(doc, dict) for doc in value):
        raise QueryError(5858203, "$documents must evaluate to an array of objects")
    return value


# -- $out and $merge --------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputTarget:
    """Where `$out` / `$merge` writes, and (for $merge) what to do with each document."""

    db: str
    coll: str
    replace_all: bool  # $out: the collection becomes exactly the results
    on: tuple[str, ...] = ("_id",)
    when_matched: str = "merge"
    when_not_matched: str = "insert"


_WHEN_MATCHED = ("replace", "keepExisting", "merge", "fail")
_WHEN_NOT_MATCHED = ("insert", "discard", "fail")


def output_target(name: str, spec: Any, db: str) -> OutputTarget:
    """The target of a final `$out` or `$merge` stage, validated."""
    if name == "$out":
        if isinstance(spec, dict):
            db, spec = spec.get("db", db), spec.get("coll")
        if not isinstance(spec, str) or not spec:
            raise QueryError(16990, "$out only supports a string or an object with db and coll")
        return OutputTarget(db, spec, replace_all=True)
    if isinstance(spec, str):
        spec = {"into": spec}
    if not isinstance(spec, dict) or "into" not in spec:
        raise QueryError(40414, "$merge needs 'into'")
    into = spec["into"]
    if isinstance(into, dict):
        db, into = into.get("db", db), into.get("coll")
    if not isinstance(into, str) or not into:
        raise QueryError(13111, "$merge 'into' must be a string or an object with db and coll")
    on = spec.get("on", "_id")
    on_fields = tuple([on] if isinstance(on, str) else on)
    if "_id" not in on_fields:
        # Other 'on' fields need a unique index on exactly them; say it plainly.
        raise QueryError(51183, "the sandbox's $merge matches only on '_id'")
    matched, not_matched = spec.get("whenMatched", "merge"), spec.get("whenNotMatched", "insert")
    if matched not in _WHEN_MATCHED:
        raise QueryError(51191, f"unsupported whenMatched for $merge: {matched!r}")
    if not_matched not in _WHEN_NOT_MATCHED:
        raise QueryError(51191, f"unsupported whenNotMatched for $merge: {not_matched!r}")
    return OutputTarget(db, into, False, on_fields, matched, not_matched)


def merged_documents(
    target: OutputTarget,
    results: list[Document],
    existing: Callable[[Any], Document | None],
) -> list[Document]:
    """The documents $merge writes (each replacing any with its `_id`), given a lookup of the
    target's current document by `_id`."""
    writes = []
    for doc in results:
        if "_id" not in doc:
            raise QueryError(51132, "$merge needs an _id in each document (the sandbox does not "
                                    "generate one)")  # fmt: skip
        current = existing(doc["_id"])
        if current is None:
            if target.when_not_matched == "fail":
                raise QueryError(
                    13113, f"$merge found no document with _id {doc['_id']!r} in the target"
                )
            if target.when_not_matched == "insert":
                writes.append(doc)
        elif target.when_matched == "fail":
            raise QueryError(
                11000,
                f"E11000 duplicate key error collection: {target.db}.{target.coll} index: _id_ "
                f"dup key: {{ _id: {doc['_id']!r} }}",
                details={"keyPattern": {"_id": 1}, "keyValue": {"_id": doc["_id"]}},
            )
        elif target.when_matched == "replace":
            writes.append(doc)
        elif target.when_matched == "merge":
            writes.append({**current, **doc})
    return writes


def update_document(
    doc: Mapping[str, Any],
    update: Mapping[str, Any] | list[Any],
    *,
    inserting: bool = False,
    array_filters: list[Any] | None = None,
    variables: Mapping[str, Any] | None = None,
) -> Document:
    """The document that results from applying a replacement, operator or pipeline `update`
    to `doc` (see `updates.apply_update`); `variables` are what a pipeline update's expressions
    see as `$$name` (a command's `let`)."""
    if not isinstance(update, list):
        return apply_update(doc, update, inserting=inserting, array_filters=array_filters)
    if array_filters:
        raise QueryError(72, "arrayFilters may not be specified for pipeline-style updates")
    return id_first(apply_update_pipeline(doc, update, variables), inserting)
