"""The emulator's expression language, pipeline updates, arrayFilters and $merge planning,
against MongoDB's documented semantics."""

from __future__ import annotations

from typing import Any

import pytest

from rsdrill_emulator.expressions import compile_expression, evaluate_let
from rsdrill_emulator.pipeline import (
    documents_stage,
    merged_documents,
    output_target,
    run_pipeline,
)
from rsdrill_emulator.pipeline import update_document as apply_update
from rsdrill_emulator.query import compile_filter
from rsdrill_emulator.values import QueryError


def evaluate(expression: Any, doc: dict[str, Any], **variables: Any) -> Any:
    return compile_expression(expression)(doc, variables)


def test_expressions_read_paths_variables_and_operators() -> None:
    doc = {"_id": 1, "a": {"b": 2}, "s": "x", "arr": [{"v": 1}, {"v": 2}]}
    assert evaluate("$a.b", doc) == 2
    assert evaluate("$arr.v", doc) == [1, 2]
    assert evaluate("$$ROOT.s", doc) == "x"
    assert evaluate("$$x", doc, x=5) == 5
    assert evaluate({"$add": ["$a.b", 3, "$$x"]}, doc, x=1) == 6
    assert evaluate({"$add": ["$a.b", "$missing"]}, doc) is None
    assert evaluate({"$subtract": [10, "$a.b"]}, doc) == 8
    assert evaluate({"$concat": ["$s", "-", "$s"]}, doc) == "x-x"
    assert evaluate({"$cond": [{"$gt": ["$a.b", 1]}, "big", "small"]}, doc) == "big"
    assert evaluate({"$ifNull": ["$nope", "dflt"]}, doc) == "dflt"
    assert evaluate({"$in": [2, "$arr.v"]}, doc) is True
    assert evaluate({"$size": "$arr"}, doc) == 2
    assert evaluate({"$type": "$nope"}, doc) == "missing"
    assert evaluate({"$and": [1, {"$not": [0]}]}, doc) is True
    assert (
        evaluate(
            {"$getField": {"field": {"$literal": "$p"}, "input": {"$literal": {"$p": 7}}}}, doc
        )
        == 7
    )
    assert evaluate({"a": "$s", "gone": "$$REMOVE"}, doc) == {"a": "x"}


@pytest.mark.parametrize(
    ("expression", "code"),
    [
        ({"$toNothing": 1}, 168),
        ({"$eq": [1]}, 16020),
        ({"$setField": {"field": "$a", "value": 1, "input": {}}}, 4161106),
        ({"$setField": {"field": "a", "input": {}}}, 4161103),
        ({"$eq": [1, 2], "$ne": [1, 2]}, 15983),
        ("$a..b", 15998),
    ],
)
def test_malformed_expressions_raise_when_compiled(expression: Any, code: int) -> None:
    with pytest.raises(QueryError) as info:
        compile_expression(expression)
    assert info.value.code == code


def test_undefined_variable_and_bad_let() -> None:
    with pytest.raises(QueryError) as info:
        evaluate("$$nope", {})
    assert info.value.code == 17276
    with pytest.raises(QueryError) as info:
        evaluate_let({"Upper": 1})
    assert info.value.code == 16867
    assert evaluate_let({"x": {"$add": [1, 2]}, "y": "$$REMOVE"}) == {"x": 3, "y": None}


def test_expr_filter_sees_let_variables_and_the_document() -> None:
    docs = [{"_id": 1, "a": 1, "b": 1}, {"_id": 2, "a": 1, "b": 2}]
    same = compile_filter({"$expr": {"$eq": ["$a", "$b"]}})
    assert [d["_id"] for d in docs if same(d)] == [1]
    by_let = compile_filter({"$expr": {"$eq": ["$_id", "$$id"]}}, {"id": 2})
    assert [d["_id"] for d in docs if by_let(d)] == [2]


def test_set_field_names_fields_with_dots_and_dollars() -> None:
    doc = {"_id": 1, "foo": {}}
    top = [{"$replaceWith": {"$setField": {"field": {"$literal": "$a"}, "value": 1,
                                            "input": "$$ROOT"}}}]  # fmt: skip
    assert apply_update(doc, top) == {"_id": 1, "foo": {}, "$a": 1}
    nested = [{"$set": {"foo": {"$setField": {"field": "a.b", "value": 1, "input": "$foo"}}}}]
    assert apply_update(doc, nested) == {"_id": 1, "foo": {"a.b": 1}}


def test_pipeline_update_stages() -> None:
    doc = {"_id": 1, "x": 1, "y": 2}
    assert apply_update(doc, [{"$project": {"x": 1}}, {"$addFields": {"foo": 1}}]) == {
        "_id": 1,
        "x": 1,
        "foo": 1,
    }
    assert apply_update(doc, [{"$replaceRoot": {"newRoot": {"z": "$y"}}}]) == {"_id": 1, "z": 2}
    assert apply_update(doc, [{"$set": {"x": "$$v"}}], variables={"v": "foo"})["x"] == "foo"
    with pytest.raises(QueryError) as info:
        apply_update(doc, [{"$replaceWith": "$x"}])
    assert info.value.code == 40228


def test_array_filters_update_selected_elements_only() -> None:
    doc = {"_id": 1, "y": [{"b": 3, "c": [{"d": 1}, {"d": 2}]}, {"b": 1}]}
    assert apply_update(doc, {"$set": {"y.$[i].b": 2}}, array_filters=[{"i.b": 3}])["y"] == [
        {"b": 2, "c": [{"d": 1}, {"d": 2}]},
        {"b": 1},
    ]
    nested = apply_update(
        doc, {"$set": {"y.$[i].c.$[j].d": 0}}, array_filters=[{"i.b": 3}, {"j.d": {"$gt": 1}}]
    )
    assert nested["y"][0]["c"] == [{"d": 1}, {"d": 0}]
    assert apply_update(doc, {"$inc": {"y.$[].b": 1}})["y"][1] == {"b": 2}
    assert apply_update(doc, {"$set": {"y.$[i].b": 0}}, array_filters=[{"i.b": 9}]) == doc


@pytest.mark.parametrize(
    ("update", "array_filters", "code"),
    [
        ({"$set": {"y.$[i].b": 1}}, [], 2),  # no filter for i
        ({"$set": {"y.b": 1}}, [{"i.b": 1}], 9),  # filter not used
        ({"$set": {"y.$[i].b": 1}}, [{"i.b": 1, "j.b": 1}], 9),  # two identifiers
        ({"$set": {"x.$[].b": 1}}, [], 2),  # not an array
        ({"b": 1}, [{"i.b": 1}], 2),  # replacement
    ],
)
def test_array_filter_errors(update: Any, array_filters: Any, code: int) -> None:
    with pytest.raises(QueryError) as info:
        apply_update({"_id": 1, "y": [{"b": 1}], "x": 1}, update, array_filters=array_filters)
    assert info.value.code == code


def test_database_source_and_project_with_computed_fields() -> None:
    docs = documents_stage([{"a": 1}, {"a": 2}], {})
    assert run_pipeline(docs, [{"$project": {"_id": 0, "twice": {"$add": ["$a", "$a"]}}}]) == [
        {"twice": 2},
        {"twice": 4},
    ]
    assert run_pipeline(docs, [{"$unset": "a"}]) == [{}, {}]


def test_merge_modes_and_duplicate_key_details() -> None:
    existing = {1: {"_id": 1, "a": 1, "keep": True}}
    results = [{"_id": 1, "a": 2}, {"_id": 2, "a": 3}]
    merge = output_target("$merge", "out", "db")
    assert merged_documents(merge, results, existing.get) == [
        {"_id": 1, "a": 2, "keep": True},
        {"_id": 2, "a": 3},
    ]
    keep = output_target("$merge", {"into": "out", "whenMatched": "keepExisting",
                                     "whenNotMatched": "discard"}, "db")  # fmt: skip
    assert merged_documents(keep, results, existing.get) == []
    fail = output_target("$merge", {"into": {"db": "d2", "coll": "c"}, "whenMatched": "fail"}, "db")
    with pytest.raises(QueryError) as info:
        merged_documents(fail, results, existing.get)
    assert info.value.code == 11000
    assert info.value.details == {"keyPattern": {"_id": 1}, "keyValue": {"_id": 1}}
    assert output_target("$out", {"db": "d2", "coll": "c"}, "db").db == "d2"
