"""Behaviour of the emulator's pure query engine against MongoDB's documented semantics."""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cmp_to_key
from typing import Any

import pytest
from bson.binary import Binary
from bson.code import Code
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.son import SON
from bson.timestamp import Timestamp
from hypothesis import given
from hypothesis import strategies as st

from rsdrill_emulator.pipeline import run_pipeline, update_document
from rsdrill_emulator.projection import project, sort_documents
from rsdrill_emulator.query import compile_filter, matches
from rsdrill_emulator.updates import apply_update, upsert_seed
from rsdrill_emulator.values import QueryError, collation, compare


def error(call: Callable[..., Any], *args: Any, **kwargs: Any) -> QueryError:
    """The QueryError `call(*args, **kwargs)` raises."""
    with pytest.raises(QueryError) as info:
        call(*args, **kwargs)
    return info.value


# One value per canonical type bracket, in MongoDB's order.
ORDERED_BRACKETS = [
    MinKey(),
    None,
    -5,
    "a",
    {"a": 1},
    [1],
    b"\x00",
    ObjectId("000000000000000000000001"),
    False,
    datetime(2020, 1, 1),
    Timestamp(1, 1),
    Regex("a"),
    Code("f()"),
    MaxKey(),
]


# --- QueryError -----------------------------------------------------------------------------


def test_query_error_carries_code_name_and_message() -> None:
    exc = QueryError(66, "immutable")
    assert (exc.code, exc.code_name, exc.message, str(exc)) == (
        66,
        "ImmutableField",
        "immutable",
        "immutable",
    )
    assert QueryError(12345, "x").code_name == "Location12345"


# --- compare --------------------------------------------------------------------------------


def test_compare_orders_type_brackets_like_mongodb() -> None:
    for lower, higher in itertools.pairwise(ORDERED_BRACKETS):
        assert compare(lower, higher) == -1, (lower, higher)
        assert compare(higher, lower) == 1, (lower, higher)
    shuffled = ORDERED_BRACKETS[::-1]
    assert sorted(shuffled, key=cmp_to_key(compare)) == ORDERED_BRACKETS


def test_compare_numbers_numerically_across_numeric_types() -> None:
    assert compare(1, 1.0) == 0
    assert compare(Int64(2), Decimal128("2.00")) == 0
    assert compare(3, Decimal128("2.5")) == 1
    assert compare(2**40, Int64(2**40 + 1)) == -1
    assert compare(-0.0, 0) == 0
    assert compare(True, 100) == 1  # bool is its own bracket above numbers, not 1


def test_compare_nan_sorts_below_every_number_and_equals_itself() -> None:
    nan = float("nan")
    assert compare(nan, float("-inf")) == -1
    assert compare(Decimal128("NaN"), -(10**9)) == -1
    assert compare(nan, Decimal128("NaN")) == 0
    assert compare(None, nan) == -1


def test_compare_strings_binary_and_scalars_within_bracket() -> None:
    assert compare("a", "b") == -1
    assert compare("b", "ab") == 1
    assert compare("é", "z") == 1  # code point / UTF-8 byte order, not locale
    assert compare(b"\xff", b"\x00\x00") == -1  # binary: shorter first
    assert compare(Binary(b"a", 0), Binary(b"a", 4)) == -1  # then subtype
    assert compare(ObjectId("0" * 23 + "1"), ObjectId("0" * 23 + "2")) == -1
    assert compare(False, True) == -1
    assert compare(Timestamp(1, 9), Timestamp(2, 0)) == -1
    assert compare(Regex("a", "i"), Regex("a", "")) == 1
    assert compare(MinKey(), MinKey()) == 0


def test_compare_datetimes_ignores_naive_versus_utc_aware() -> None:
    naive = datetime(2024, 5, 1, 12, 0)
    assert compare(naive, datetime(2024, 5, 1, 12, 0, tzinfo=UTC)) == 0
    assert compare(naive, datetime(2024, 5, 1, 12, 1)) == -1


def test_compare_documents_field_by_field_type_then_name_then_value() -> None:
    assert compare({"a": 1}, {"a": 2}) == -1
    assert compare({"a": 9}, {"b": 0}) == -1
    assert compare({"b": 1}, {"a": "x"}) == -1  # the number bracket wins before the name
    assert compare({"a": 1}, {"a": 1, "b": 0}) == -1
    assert compare({"a": 1, "b": 2}, {"b": 2, "a": 1}) == -1  # field order matters
    assert compare({"a": {"x": 1}}, {"a": {"x": 1.0}}) == 0


def test_compare_arrays_element_by_element() -> None:
    assert compare([1, 2], [1, 3]) == -1
    assert compare([1], [1, 0]) == -1
    assert compare([2], [1, 9]) == 1
    assert compare([], []) == 0


def test_compare_rejects_non_bson_values() -> None:
    with pytest.raises(TypeError, match="not a BSON value: object"):
        compare(object(), 1)


# --- matches: equality ------------------------------------------------------------------------


def test_empty_filter_matches_everything() -> None:
    assert matches({}, {})
    assert matches({"_id": 1, "a": [1]}, {})


def test_equality_compares_numbers_across_types() -> None:
    for stored in (1, 1.0, Int64(1), Decimal128("1")):
        assert matches({"a": stored}, {"a": 1})
    assert not matches({"a": "1"}, {"a": 1})
    assert not matches({"a": True}, {"a": 1})


def test_null_equality_matches_null_and_missing_only() -> None:
    assert matches({"a": None}, {"a": None})
    assert matches({}, {"a": None})
    assert matches({"a": [1, None]}, {"a": None})
    assert not matches({"a": 0}, {"a": None})
    assert not matches({"a": []}, {"a": None})


def test_scalar_matches_any_array_element_and_arrays_match_whole() -> None:
    doc = {"tags": ["red", "blue"], "grid": [[1, 2], 3]}
    assert matches(doc, {"tags": "blue"})
    assert matches(doc, {"tags": ["red", "blue"]})
    assert not matches(doc, {"tags": ["blue", "red"]})
    assert not matches(doc, {"tags": "green"})
    assert matches(doc, {"grid": [1, 2]})  # an element that is itself an array
    assert not matches(doc, {"grid": 1})  # only one level of arrays is looked into


def test_embedded_document_equality_is_exact_and_ordered() -> None:
    doc = {"a": {"b": 1, "c": 2}}
    assert matches(doc, {"a": {"b": 1, "c": 2}})
    assert matches(doc, {"a": {"b": 1.0, "c": Int64(2)}})
    assert not matches(doc, {"a": {"c": 2, "b": 1}})
    assert not matches(doc, {"a": {"b": 1}})


def test_dotted_paths_through_documents_and_arrays_of_documents() -> None:
    doc = {"a": {"b": {"c": 3}}, "items": [{"sku": "x", "qty": 1}, {"sku": "y", "qty": 5}]}
    assert matches(doc, {"a.b.c": 3})
    assert matches(doc, {"items.sku": "y"})
    assert matches(doc, {"items.qty": {"$gt": 4}})
    assert not matches(doc, {"items.qty": {"$gt": 5}})
    assert matches(doc, {"items.1.sku": "y"})
    assert not matches(doc, {"items.0.sku": "y"})
    assert matches({"a": [{"b": [{"c": 1}]}]}, {"a.b.c": 1})
    assert not matches({"a": [[{"b": 1}]]}, {"a.b": 1})  # no implicit descent into nested arrays


def test_numeric_path_parts_index_arrays() -> None:
    assert matches({"a": [4, 7]}, {"a.1": 7})
    assert not matches({"a": [4, 7]}, {"a.0": 7})
    assert matches({"a": [4, 7]}, {"a.5": None})  # past the end is missing
    assert matches({"a": {"1": "x"}}, {"a.1": "x"})  # on a document it is a field name


def test_dotted_null_matches_array_elements_missing_the_field() -> None:
    assert matches({"a": [{"b": 1}, {"c": 2}]}, {"a.b": None})
    assert not matches({"a": [{"b": 1}, {"b": 2}]}, {"a.b": None})
    assert matches({"a": 5}, {"a.b": None})


# --- matches: comparison operators --------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "expected"),
    [("$eq", [5]), ("$gt", [7]), ("$gte", [5, 7]), ("$lt", [3]), ("$lte", [3, 5])],
)
def test_comparison_operators(operator: str, expected: list[int]) -> None:
    docs = [{"a": 3}, {"a": 5}, {"a": 7}, {"a": "5"}, {}]
    assert [doc["a"] for doc in docs if matches(doc, {"a": {operator: 5}})] == expected


def test_comparisons_stay_within_the_type_bracket() -> None:
    assert not matches({"a": "2"}, {"a": {"$gt": 1}})
    assert not matches({"a": 5}, {"a": {"$lt": "z"}})
    assert not matches({"a": True}, {"a": {"$gte": 0}})
    assert matches({"a": "b"}, {"a": {"$gt": "a"}})
    assert matches({"a": datetime(2024, 1, 2)}, {"a": {"$gt": datetime(2024, 1, 1)}})
    assert not matches({"a": [1, "9"]}, {"a": {"$gt": 5}})


def test_comparison_with_null_covers_missing_fields() -> None:
    assert matches({}, {"a": {"$gte": None}})
    assert matches({"a": None}, {"a": {"$lte": None}})
    assert not matches({}, {"a": {"$gt": None}})
    assert not matches({"a": 1}, {"a": {"$gte": None}})


def test_minkey_and_maxkey_bound_every_type() -> None:
    assert matches({"a": "x"}, {"a": {"$gt": MinKey()}})
    assert matches({"a": 5}, {"a": {"$lt": MaxKey()}})
    assert not matches({"a": 5}, {"a": {"$gt": MaxKey()}})


def test_nan_only_equals_nan_in_queries() -> None:
    nan = float("nan")
    assert matches({"a": nan}, {"a": nan})
    assert matches({"a": nan}, {"a": {"$gte": Decimal128("NaN")}})
    assert not matches({"a": nan}, {"a": {"$lt": 1}})
    assert not matches({"a": 1}, {"a": {"$gt": nan}})


def test_range_on_array_may_be_met_by_different_elements() -> None:
    doc = {"a": [1, 7]}
    assert matches(doc, {"a": {"$gt": 5, "$lt": 3}})
    assert not matches(doc, {"a": {"$elemMatch": {"$gt": 5, "$lt": 3}}})
    assert matches(doc, {"a": {"$elemMatch": {"$gt": 5, "$lt": 8}}})


def test_ne_matches_missing_and_excludes_any_equal_element() -> None:
    assert matches({}, {"a": {"$ne": 1}})
    assert matches({"a": 2}, {"a": {"$ne": 1}})
    assert not matches({"a": [2, 1]}, {"a": {"$ne": 1}})
    assert not matches({}, {"a": {"$ne": None}})
    assert matches({"a": 0}, {"a": {"$ne": None}})


def test_in_and_nin() -> None:
    assert matches({"a": 2}, {"a": {"$in": [1, 2.0]}})
    assert matches({"a": [5, 3]}, {"a": {"$in": [3]}})
    assert matches({}, {"a": {"$in": [None]}})
    assert not matches({"a": 4}, {"a": {"$in": []}})
    assert matches({"a": "Apple"}, {"a": {"$in": [Regex("^ap", "i")]}})
    assert matches({}, {"a": {"$nin": [1]}})
    assert not matches({"a": [0, 1]}, {"a": {"$nin": [1]}})
    assert matches({"a": 2}, {"a": {"$nin": [1, 3]}})


def test_exists() -> None:
    assert matches({"a": None}, {"a": {"$exists": True}})
    assert not matches({}, {"a": {"$exists": True}})
    assert matches({}, {"a": {"$exists": False}})
    assert matches({"a": 1}, {"a": {"$exists": 1}})
    assert matches({"a": [{"b": 1}, {}]}, {"a.b": {"$exists": True}})
    assert matches({"a": [1, 2]}, {"a.b": {"$exists": False}})


def test_logical_operators() -> None:
    doc = {"a": 1, "b": 2}
    assert matches(doc, {"$and": [{"a": 1}, {"b": 2}]})
    assert not matches(doc, {"$and": [{"a": 1}, {"b": 3}]})
    assert matches(doc, {"$or": [{"a": 9}, {"b": 2}]})
    assert not matches(doc, {"$or": [{"a": 9}, {"b": 9}]})
    assert matches(doc, {"$nor": [{"a": 9}, {"b": 9}]})
    assert not matches(doc, {"$nor": [{"a": 1}]})
    assert matches(doc, {"a": 1, "$or": [{"c": {"$exists": False}}]})


def test_not() -> None:
    assert matches({"a": 3}, {"a": {"$not": {"$gt": 5}}})
    assert matches({}, {"a": {"$not": {"$gt": 5}}})
    assert not matches({"a": 7}, {"a": {"$not": {"$gt": 5}}})
    assert matches({"a": "xyz"}, {"a": {"$not": Regex("^a")}})
    assert not matches({"a": "abc"}, {"a": {"$not": Regex("^a")}})


def test_type() -> None:
    assert matches({"a": "s"}, {"a": {"$type": "string"}})
    assert matches({"a": "s"}, {"a": {"$type": 2}})
    assert matches({"a": Int64(1)}, {"a": {"$type": "long"}})
    assert not matches({"a": 1}, {"a": {"$type": "long"}})
    assert matches({"a": 1}, {"a": {"$type": "int"}})
    assert matches({"a": 2**40}, {"a": {"$type": "long"}})
    assert matches({"a": Decimal128("1")}, {"a": {"$type": "number"}})
    assert not matches({"a": True}, {"a": {"$type": "number"}})
    assert matches({"a": [1, "x"]}, {"a": {"$type": "string"}})
    assert matches({"a": []}, {"a": {"$type": "array"}})
    assert matches({"a": None}, {"a": {"$type": ["double", "null"]}})
    assert not matches({}, {"a": {"$type": "null"}})


def test_regex() -> None:
    doc = {"name": "Alice", "n": 5, "pattern": Regex("^A", "i")}
    assert matches(doc, {"name": {"$regex": "^al", "$options": "i"}})
    assert not matches(doc, {"name": {"$regex": "^al"}})
    assert matches(doc, {"name": Regex("ic")})
    assert matches(doc, {"name": re.compile("LIC", re.IGNORECASE)})
    assert not matches(doc, {"n": {"$regex": "5"}})
    assert matches({"tags": ["x", "beta"]}, {"tags": {"$regex": "^b"}})
    assert matches(doc, {"pattern": Regex("^A", "i")})  # a stored regex equals itself
    assert matches(doc, {"pattern": {"$eq": Regex("^A", "i")}})
    assert not matches({"s": "line1\nline2"}, {"s": {"$regex": "^line2"}})
    assert matches({"s": "line1\nline2"}, {"s": {"$regex": "^line2", "$options": "m"}})


def test_size_all_and_elem_match() -> None:
    doc = {"a": [1, 2, 3], "items": [{"k": "x", "v": 1}, {"k": "y", "v": 9}]}
    assert matches(doc, {"a": {"$size": 3}})
    assert not matches(doc, {"a": {"$size": 2}})
    assert matches(doc, {"a": {"$all": [3, 1]}})
    assert not matches(doc, {"a": {"$all": [1, 4]}})
    assert not matches(doc, {"a": {"$all": []}})
    assert matches(doc, {"items": {"$elemMatch": {"k": "y", "v": {"$gt": 5}}}})
    assert not matches(doc, {"items": {"$elemMatch": {"k": "x", "v": {"$gt": 5}}}})
    assert matches(doc, {"items": {"$all": [{"$elemMatch": {"k": "x"}}]}})


def test_comment_is_ignored() -> None:
    assert matches({"a": 1}, {"a": 1, "$comment": "why"})


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"a": {"$foo": 1}}, "unknown operator: $foo"),
        ({"$where": "true"}, "unknown top level operator: $where"),
        ({"a": {"$gt": 1, "b": 2}}, "unknown operator: b"),
        ({"$or": []}, "$or must be a nonempty array"),
        ({"$and": [1]}, "$and argument's entries must be objects"),
        ({"a": {"$in": 1}}, "$in needs an array"),
        ({"a": {"$nin": [{"$gt": 1}]}}, "cannot nest $ under $nin"),
        ({"a": {"$not": 5}}, "$not needs a regex or a document"),
        ({"a": {"$not": {}}}, "$not cannot be empty"),
        ({"a": {"$options": "i"}}, "$options needs a $regex"),
        ({"a": {"$type": "color"}}, "Unknown type name alias: color"),
        ({"a": {"$type": 99}}, "Invalid numerical type code: 99"),
        ({"a": {"$size": -1}}, "$size needs a non-negative integer"),
        ({"a": {"$all": 1}}, "$all needs an array"),
        ({"a": {"$elemMatch": 1}}, "$elemMatch needs an Object"),
    ],
)
def test_malformed_filters_raise_bad_value(query: dict[str, Any], message: str) -> None:
    exc = error(matches, {"a": 1}, query)
    assert (exc.code, exc.code_name) == (2, "BadValue")
    assert message in exc.message


def test_filters_are_validated_before_any_document_is_examined() -> None:
    exc = error(matches, {}, {"a": 1, "b": {"$foo": 1}})  # the first clause already fails
    assert exc.code == 2
    assert error(compile_filter, {"a": {"$bad": 1}}).message == "unknown operator: $bad"


def test_invalid_regexes_raise() -> None:
    assert error(matches, {"a": "x"}, {"a": {"$regex": "a", "$options": "q"}}).code == 51108
    assert error(matches, {"a": "x"}, {"a": {"$regex": "("}}).code == 51091


def test_compiled_filter_is_reusable() -> None:
    is_adult = compile_filter({"age": {"$gte": 18}})
    ages = [{"age": age} for age in (10, 18, 40)]
    assert [doc["age"] for doc in ages if is_adult(doc)] == [18, 40]


# --- apply_update ----------------------------------------------------------------------------


def test_set_keeps_existing_position_and_appends_new_fields() -> None:
    doc = {"_id": 1, "a": 1, "b": 2}
    result = apply_update(doc, {"$set": {"a": 10, "c": 3}})
    assert list(result.items()) == [("_id", 1), ("a", 10), ("b", 2), ("c", 3)]


def test_new_fields_are_appended_in_field_name_order() -> None:
    # MongoDB 5.0+ applies update operators in lexicographic path order.
    result = apply_update({"_id": 1}, {"$set": {"z": 1, "m": 2}, "$inc": {"b": 1}})
    assert list(result) == ["_id", "b", "m", "z"]
    padded = apply_update({"_id": 1, "a": []}, {"$set": {"a.10": "x", "a.2": "y"}})
    assert padded["a"] == [None, None, "y", None, None, None, None, None, None, None, "x"]


def test_set_dotted_paths_create_embedded_documents() -> None:
    result = apply_update({"_id": 1, "a": {"x": 1}}, {"$set": {"a.b.c": 5, "d.e": 6}})
    assert result == {"_id": 1, "a": {"x": 1, "b": {"c": 5}}, "d": {"e": 6}}


def test_set_into_arrays_by_index_pads_with_null() -> None:
    doc = {"_id": 1, "a": [{"b": 1}, {"b": 2}]}
    assert apply_update(doc, {"$set": {"a.1.b": 9}})["a"] == [{"b": 1}, {"b": 9}]
    assert apply_update(doc, {"$set": {"a.3": 0}})["a"] == [{"b": 1}, {"b": 2}, None, 0]


def test_set_through_a_scalar_or_non_index_on_array_is_path_not_viable() -> None:
    exc = error(apply_update, {"_id": 1, "a": 5}, {"$set": {"a.b": 1}})
    assert (exc.code, exc.code_name) == (28, "PathNotViable")
    assert exc.message == "Cannot create field 'b' in element {a: 5}"
    assert error(apply_update, {"_id": 1, "a": [1]}, {"$set": {"a.b": 1}}).code == 28


def test_unset() -> None:
    doc = {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "arr": [1, 2]}
    result = apply_update(doc, {"$unset": {"a": "", "b.c": 1, "missing.x": 1, "arr.0": 1}})
    assert result == {"_id": 1, "b": {"d": 3}, "arr": [None, 2]}


def test_inc_numeric_types() -> None:
    doc = {"_id": 1, "i": 1, "big": 2**31 - 1, "long": Int64(5), "f": 1.5, "d": Decimal128("1.1")}
    result = apply_update(
        doc, {"$inc": {"i": 2, "big": 1, "long": 1, "f": 1, "d": 1, "new": -3, "x.y": 1}}
    )
    assert result["i"] == 3 and type(result["i"]) is int
    assert result["big"] == 2**31 and type(result["big"]) is Int64
    assert result["long"] == 6 and type(result["long"]) is Int64
    assert result["f"] == 2.5
    assert result["d"] == Decimal128("2.1")
    assert result["new"] == -3
    assert result["x"] == {"y": 1}


def test_inc_on_non_number_is_type_mismatch() -> None:
    exc = error(apply_update, {"_id": 1, "a": "x"}, {"$inc": {"a": 1}})
    assert (exc.code, exc.code_name) == (14, "TypeMismatch")
    assert exc.message.startswith("Cannot apply $inc to a value of non-numeric type")
    assert "of non-numeric type string" in exc.message
    exc = error(apply_update, {"_id": 1, "a": 1}, {"$inc": {"a": "1"}})
    assert (exc.code, exc.message) == (14, "Cannot increment with non-numeric argument: {a: '1'}")


def test_min_and_max() -> None:
    doc = {"_id": 1, "lo": 5, "hi": 5}
    assert apply_update(doc, {"$min": {"lo": 3, "hi": 7}}) == {"_id": 1, "lo": 3, "hi": 5}
    assert apply_update(doc, {"$max": {"lo": 9, "hi": 4}}) == {"_id": 1, "lo": 9, "hi": 5}
    assert apply_update(doc, {"$min": {"new": 1}})["new"] == 1
    assert apply_update(doc, {"$min": {"lo": None}})["lo"] is None  # null < numbers
    assert apply_update(doc, {"$max": {"lo": "a"}})["lo"] == "a"  # strings > numbers


def test_push() -> None:
    doc = {"_id": 1, "a": [1]}
    assert apply_update(doc, {"$push": {"a": [2]}})["a"] == [1, [2]]
    assert apply_update(doc, {"$push": {"a": {"$each": [2, 3]}}})["a"] == [1, 2, 3]
    assert apply_update(doc, {"$push": {"b.c": 1}})["b"] == {"c": [1]}
    exc = error(apply_update, {"_id": 1, "a": 1}, {"$push": {"a": 2}})
    assert exc.code == 2
    assert exc.message == "The field 'a' must be an array but is of type int in document {_id: 1}"
    exc = error(apply_update, doc, {"$push": {"a": {"$each": [1], "$slice": 2}}})
    assert (exc.code, exc.message) == (2, "unsupported $push modifier for 'a': $slice")


def test_rename() -> None:
    doc = {"_id": 1, "a": 1, "b": 2, "c": {"d": 4}}
    assert list(apply_update(doc, {"$rename": {"a": "z"}}).items()) == [
        ("_id", 1),
        ("b", 2),
        ("c", {"d": 4}),
        ("z", 1),
    ]
    assert apply_update(doc, {"$rename": {"c.d": "e.f"}}) == {
        "_id": 1,
        "a": 1,
        "b": 2,
        "c": {},
        "e": {"f": 4},
    }
    assert apply_update(doc, {"$rename": {"missing": "x"}}) == doc
    assert list(apply_update(doc, {"$rename": {"a": "b"}}).items()) == [
        ("_id", 1),
        ("b", 1),
        ("c", {"d": 4}),
    ]
    assert error(apply_update, doc, {"$rename": {"a": "a"}}).code == 2
    assert error(apply_update, doc, {"$rename": {"a": 5}}).code == 2
    exc = error(apply_update, {"_id": 1, "a": [{"b": 1}]}, {"$rename": {"a.0.b": "c"}})
    assert exc.message == "The source field cannot be an array element: a.0.b"


def test_set_on_insert_only_applies_when_inserting() -> None:
    update = {"$set": {"a": 1}, "$setOnInsert": {"created": True}}
    assert apply_update({"_id": 1}, update) == {"_id": 1, "a": 1}
    assert apply_update({"_id": 1}, update, inserting=True) == {"_id": 1, "a": 1, "created": True}


def test_inserting_moves_id_first() -> None:
    result = apply_update({"k": 1}, {"$set": {"_id": 7, "v": 2}}, inserting=True)
    assert list(result.items()) == [("_id", 7), ("k", 1), ("v", 2)]


@pytest.mark.parametrize(
    "update",
    [
        {"$set": {"_id": 2}},
        {"$unset": {"_id": 1}},
        {"$inc": {"_id": 1}},
        {"$rename": {"_id": "old"}},
        {"_id": 2, "a": 1},
    ],
)
def test_id_is_immutable(update: dict[str, Any]) -> None:
    exc = error(apply_update, {"_id": 1, "a": 0}, update)
    assert (exc.code, exc.code_name) == (66, "ImmutableField")
    assert exc.message == (
        "Performing an update on the path '_id' would modify the immutable field '_id'"
    )


def test_setting_id_to_an_equal_value_is_allowed() -> None:
    assert apply_update({"_id": 1, "a": 0}, {"$set": {"_id": 1, "a": 5}}) == {"_id": 1, "a": 5}
    assert apply_update({"_id": 1}, {"_id": 1.0, "b": 1}) == {"_id": 1, "b": 1}


def test_replacement_keeps_original_id_first_and_drops_other_fields() -> None:
    oid = ObjectId()
    result = apply_update({"_id": oid, "a": 1, "b": 2}, {"c": 3, "d": {"e": 4}})
    assert list(result.items()) == [("_id", oid), ("c", 3), ("d", {"e": 4})]
    assert list(apply_update({"_id": oid}, {"x": 1, "_id": oid})) == ["_id", "x"]
    assert apply_update({"_id": oid, "a": 1}, {}) == {"_id": oid}
    assert list(apply_update({}, {"x": 1, "_id": 5}, inserting=True)) == ["_id", "x"]


@pytest.mark.parametrize(
    ("update", "conflict"),
    [
        (
            {"$set": {"a": 1}, "$inc": {"a": 1}},
            "Updating the path 'a' would create a conflict at 'a'",
        ),
        ({"$set": {"a": 1, "a.b": 2}}, "Updating the path 'a.b' would create a conflict at 'a'"),
        ({"$set": {"x.y.z": 1}, "$unset": {"x.y": 1}}, "path 'x.y.z' would create a conflict"),
        ({"$rename": {"a": "b"}, "$set": {"a": 1}}, "at 'a'"),
        ({"$rename": {"a": "b"}, "$set": {"b.c": 1}}, "at 'b'"),
        ({"$set": {"a": 1}, "$setOnInsert": {"a": 2}}, "at 'a'"),
    ],
)
def test_operators_touching_the_same_path_conflict(update: dict[str, Any], conflict: str) -> None:
    exc = error(apply_update, {"_id": 1, "a": 0}, update)
    assert (exc.code, exc.code_name) == (40, "ConflictingUpdateOperators")
    assert conflict in exc.message


def test_sibling_paths_do_not_conflict() -> None:
    result = apply_update({"_id": 1}, {"$set": {"a.b": 1, "a.bc": 2, "ab": 3}})
    assert result == {"_id": 1, "a": {"b": 1, "bc": 2}, "ab": 3}


@pytest.mark.parametrize(
    ("update", "code", "message"),
    [
        ({"$set": {"a": 1}, "b": 2}, 9, "Unknown modifier: b"),
        ({"b": 2, "$set": {"a": 1}}, 9, "The dollar ($) prefixed field '$set'"),
        ({"$foo": {"a": 1}}, 9, "Unknown modifier: $foo"),
        ({"$set": 5}, 9, "Modifiers operate on fields but we found type int instead"),
        ({"$set": {"": 1}}, 56, "An empty update path is not valid."),
        ({"$set": {"a..b": 1}}, 56, "contains an empty field name"),
        ({"$set": {"a.$": 1}}, 2, "positional and $-prefixed update paths are not supported"),
        ({"$push": {"a": {"$each": 1}}}, 2, "The argument to $each in $push must be an array"),
    ],
)
def test_malformed_updates(update: dict[str, Any], code: int, message: str) -> None:
    exc = error(apply_update, {"_id": 1, "a": []}, update)
    assert exc.code == code
    assert message in exc.message


def test_pipeline_updates_are_applied_and_may_not_change_id() -> None:
    assert update_document({"_id": 1, "a": 2}, [{"$set": {"b": "$a"}}, {"$unset": "a"}]) == {
        "_id": 1,
        "b": 2,
    }
    assert error(update_document, {"_id": 1}, [{"$set": {"_id": 2}}]).code == 66
    assert error(update_document, {"_id": 1}, [{"$match": {}}]).code == 72
    assert error(update_document, {"_id": 1}, "nonsense").code == 9


def test_apply_update_never_mutates_or_aliases_its_arguments() -> None:
    doc = {"_id": 1, "a": {"b": [1]}, "n": 1}
    update = {"$set": {"c": {"d": [2]}}, "$push": {"a.b": 3}, "$inc": {"n": 1}}
    doc_before, update_before = copy.deepcopy(doc), copy.deepcopy(update)
    result = apply_update(doc, update)
    assert (doc, update) == (doc_before, update_before)
    result["c"]["d"].append(99)
    result["a"]["b"].append(99)
    assert (doc, update) == (doc_before, update_before)


# --- upsert_seed -----------------------------------------------------------------------------


def test_upsert_seed_collects_equalities_and_expands_dotted_paths() -> None:
    query = {
        "_id": 5,
        "a.b": 1,
        "a.c": {"$eq": 2},
        "n": {"$gt": 3},
        "r": Regex("^x"),
        "t": {"$in": [1, 2]},
        "$and": [{"d": "x"}, {"e.f": {"$eq": None}}],
        "$or": [{"g": 1}, {"h": 2}],
        "doc": {"k": [1]},
    }
    assert upsert_seed(query) == {
        "_id": 5,
        "a": {"b": 1, "c": 2},
        "d": "x",
        "e": {"f": None},
        "doc": {"k": [1]},
    }


def test_upsert_seed_of_one_clause_or_and_empty_filter() -> None:
    assert upsert_seed({"$or": [{"a": 1}]}) == {"a": 1}
    assert upsert_seed({}) == {}


def test_upsert_seed_rejects_paths_matched_twice() -> None:
    exc = error(upsert_seed, {"a": 1, "$and": [{"a": 2}]})
    assert (exc.code, exc.code_name) == (54, "NotSingleValueField")
    assert error(upsert_seed, {"a": {"b": 1}, "a.c": 2}).code == 54
    assert error(upsert_seed, {"a": {"$bad": 1}}).code == 2


def test_upsert_seed_then_update_builds_the_inserted_document() -> None:
    seed = upsert_seed({"name": "x", "meta.v": 1})
    result = apply_update(seed, {"$set": {"_id": 9}, "$inc": {"meta.n": 1}}, inserting=True)
    assert list(result.items()) == [("_id", 9), ("name", "x"), ("meta", {"v": 1, "n": 1})]


def test_upsert_seed_copies_values() -> None:
    query = {"a": {"b": [1]}}
    upsert_seed(query)["a"]["b"].append(2)
    assert query == {"a": {"b": [1]}}


# --- project ---------------------------------------------------------------------------------

DOC = {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"c": 4, "f": 5}, 6, [{"c": 7}]], "g": 8}


def test_empty_projection_returns_an_equal_copy() -> None:
    for projection in (None, {}):
        result = project(DOC, projection)
        assert result == DOC and result is not DOC
        assert result["b"] is not DOC["b"]


def test_inclusion_keeps_document_order_and_id() -> None:
    result = project(DOC, {"g": 1, "a": True})
    assert list(result.items()) == [("_id", 1), ("a", 1), ("g", 8)]
    assert project(DOC, {"a": 1, "_id": 0}) == {"a": 1}
    assert project(DOC, {"_id": 1}) == {"_id": 1}
    assert project(DOC, {"missing": 1}) == {"_id": 1}


def test_inclusion_of_dotted_paths_into_documents_and_arrays() -> None:
    assert project(DOC, {"b.c": 1}) == {"_id": 1, "b": {"c": 2}}
    assert project(DOC, {"e.c": 1, "_id": 0}) == {"e": [{"c": 4}, [{"c": 7}]]}
    assert project(DOC, {"a.x": 1}) == {"_id": 1}  # a scalar has no sub-fields
    assert project(DOC, {"b.zz": 1}) == {"_id": 1, "b": {}}


def test_exclusion() -> None:
    assert project(DOC, {"b": 0, "e": 0, "g": 0}) == {"_id": 1, "a": 1}
    assert project(DOC, {"_id": 0, "b.c": 0, "e.f": False}) == {
        "a": 1,
        "b": {"d": 3},
        "e": [{"c": 4}, 6, [{"c": 7}]],
        "g": 8,
    }
    assert project(DOC, {"_id": 0}) == {k: v for k, v in DOC.items() if k != "_id"}
    assert project(DOC, {"a": 0, "_id": 1}) == {k: v for k, v in DOC.items() if k != "a"}


@pytest.mark.parametrize(
    ("projection", "code", "message"),
    [
        ({"a": 1, "b": 0}, 2, "Cannot do exclusion on field b in inclusion projection"),
        ({"a": 0, "b": 1}, 2, "Cannot do inclusion on field b in exclusion projection"),
        ({"a": "$b"}, 2, "unsupported projection value for 'a': '$b'"),
        ({"a.$": 1}, 2, "unsupported projection path: 'a.$'"),
        ({"a": 1, "a.b": 1}, 31250, "Path collision at a.b"),
        ({"a.b": 1, "a": 1}, 31250, "Path collision at a"),
    ],
)
def test_invalid_projections(projection: dict[str, Any], code: int, message: str) -> None:
    exc = error(project, DOC, projection)
    assert (exc.code, exc.message) == (code, message)


def test_projection_results_do_not_alias_the_document() -> None:
    result = project(DOC, {"b": 1})
    result["b"]["c"] = 99
    assert DOC["b"]["c"] == 2


# --- sort_documents --------------------------------------------------------------------------


def test_sort_ascending_descending_with_missing_as_null() -> None:
    docs = [{"i": 0, "v": 3}, {"i": 1}, {"i": 2, "v": "x"}, {"i": 3, "v": None}, {"i": 4, "v": 1}]
    assert [d["i"] for d in sort_documents(docs, {"v": 1})] == [1, 3, 4, 0, 2]
    assert [d["i"] for d in sort_documents(docs, {"v": -1})] == [2, 0, 4, 1, 3]


def test_sort_is_stable_and_multi_key() -> None:
    docs = [{"i": i, "g": i % 2, "v": -i} for i in range(6)]
    assert [d["i"] for d in sort_documents(docs, {"g": 1})] == [0, 2, 4, 1, 3, 5]
    assert [d["i"] for d in sort_documents(docs, SON([("g", -1), ("v", 1)]))] == [5, 3, 1, 4, 2, 0]


def test_sort_by_dotted_path_and_arrays() -> None:
    docs = [{"i": 0, "a": {"b": 2}}, {"i": 1, "a": [{"b": 5}, {"b": 0}]}, {"i": 2, "a": {"b": 1}}]
    assert [d["i"] for d in sort_documents(docs, {"a.b": 1})] == [1, 2, 0]  # [5, 0] sorts as 0
    assert [d["i"] for d in sort_documents(docs, {"a.b": -1})] == [1, 0, 2]  # ... and as 5
    with_empty = [{"i": 0, "a": None}, {"i": 1, "a": []}, {"i": 2, "a": 0}]
    assert [d["i"] for d in sort_documents(with_empty, {"a": 1})] == [1, 0, 2]


def test_sort_returns_a_new_list_of_the_same_documents() -> None:
    docs = [{"a": 2}, {"a": 1}]
    result = sort_documents(docs, {"a": 1})
    assert result == [{"a": 1}, {"a": 2}] and result[0] is docs[1]
    assert docs == [{"a": 2}, {"a": 1}]
    assert sort_documents(docs, {}) == docs


def test_sort_rejects_bad_directions() -> None:
    exc = error(sort_documents, [], {"a": 2})
    assert (exc.code, exc.message) == (
        2,
        "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
    )


# --- run_pipeline ----------------------------------------------------------------------------

ORDERS = [
    {"_id": 1, "cust": "a", "qty": 2, "price": 1.5, "tag": "x"},
    {"_id": 2, "cust": "b", "qty": 5, "price": 2.0},
    {"_id": 3, "cust": "a", "qty": 1, "price": None, "tag": "y"},
    {"_id": 4, "cust": "c", "qty": "many"},
    {"_id": 5, "cust": "b", "qty": 3, "price": 4.0, "tag": "z"},
]


def count_pipeline(query: dict[str, Any], **kwargs: int) -> list[dict[str, Any]]:
    """The pipeline pymongo's Collection.count_documents sends."""
    pipeline: list[dict[str, Any]] = [{"$match": query}]
    if "skip" in kwargs:
        pipeline.append({"$skip": kwargs["skip"]})
    if "limit" in kwargs:
        pipeline.append({"$limit": kwargs["limit"]})
    return [*pipeline, {"$group": {"_id": 1, "n": {"$sum": 1}}}]


def test_count_documents_pipeline() -> None:
    assert run_pipeline(ORDERS, count_pipeline({})) == [{"_id": 1, "n": 5}]
    assert run_pipeline(ORDERS, count_pipeline({"cust": "a"})) == [{"_id": 1, "n": 2}]
    assert run_pipeline(ORDERS, count_pipeline({}, skip=1, limit=3)) == [{"_id": 1, "n": 3}]
    assert run_pipeline(ORDERS, count_pipeline({}, skip=4, limit=3)) == [{"_id": 1, "n": 1}]
    assert run_pipeline(ORDERS, count_pipeline({"cust": "zzz"})) == []


def test_group_by_field_with_every_accumulator() -> None:
    pipeline = [
        {
            "$group": {
                "_id": "$cust",
                "total": {"$sum": "$qty"},
                "orders": {"$sum": 1},
                "avg": {"$avg": "$qty"},
                "lo": {"$min": "$price"},
                "hi": {"$max": "$price"},
                "first": {"$first": "$tag"},
                "last": {"$last": "$tag"},
                "tags": {"$push": "$tag"},
            }
        }
    ]
    assert run_pipeline(ORDERS, pipeline) == [
        {
            "_id": "a",
            "total": 3,
            "orders": 2,
            "avg": 1.5,
            "lo": 1.5,
            "hi": 1.5,
            "first": "x",
            "last": "y",
            "tags": ["x", "y"],
        },
        {
            "_id": "b",
            "total": 8,
            "orders": 2,
            "avg": 4.0,
            "lo": 2.0,
            "hi": 4.0,
            "first": None,
            "last": "z",
            "tags": ["z"],
        },
        {
            "_id": "c",
            "total": 0,
            "orders": 1,
            "avg": None,
            "lo": None,
            "hi": None,
            "first": None,
            "last": None,
            "tags": [],
        },
    ]


def test_group_id_null_document_and_numeric_equivalence() -> None:
    docs = [{"k": 1, "j": "x"}, {"k": 1.0, "j": "x"}, {"k": Int64(2), "j": "y"}, {"j": "x"}]
    assert run_pipeline(docs, [{"$group": {"_id": None, "n": {"$sum": 1}}}]) == [
        {"_id": None, "n": 4}
    ]
    assert run_pipeline(docs, [{"$group": {"_id": "$k", "n": {"$sum": 1}}}]) == [
        {"_id": None, "n": 1},
        {"_id": 1, "n": 2},
        {"_id": 2, "n": 1},
    ]
    by_both = run_pipeline(docs, [{"$group": {"_id": {"k": "$k", "j": "$j"}, "n": {"$sum": 1}}}])
    # Groups come out in _id order: {k: number, ...} sorts before {j: string}.
    assert by_both == [
        {"_id": {"k": 1, "j": "x"}, "n": 2},
        {"_id": {"k": 2, "j": "y"}, "n": 1},
        {"_id": {"j": "x"}, "n": 1},
    ]


def test_group_sum_types_and_literal_and_array_paths() -> None:
    docs = [{"v": Int64(1), "a": [{"b": 1}, {"b": 2}]}, {"v": 2, "a": [{"b": 3}]}]
    (result,) = run_pipeline(
        docs,
        [
            {
                "$group": {
                    "_id": {"$literal": "$x"},
                    "s": {"$sum": "$v"},
                    "bs": {"$push": "$a.b"},
                    "d": {"$sum": Decimal128("0.5")},
                    "docs": {"$push": "$$ROOT"},
                }
            }
        ],
    )
    assert result["_id"] == "$x"
    assert result["s"] == 3 and type(result["s"]) is Int64
    assert result["bs"] == [[1, 2], [3]]
    assert result["d"] == Decimal128("1.0")
    assert result["docs"] == docs


def test_count_sort_skip_limit_project_stages() -> None:
    pipeline = [
        {"$match": {"qty": {"$type": "number"}}},
        {"$sort": {"qty": -1}},
        {"$skip": 1},
        {"$limit": 2},
        {"$project": {"qty": 1, "_id": 0}},
    ]
    assert run_pipeline(ORDERS, pipeline) == [{"qty": 3}, {"qty": 2}]
    assert run_pipeline(ORDERS, [{"$match": {"cust": "b"}}, {"$count": "total"}]) == [{"total": 2}]
    assert run_pipeline(ORDERS, [{"$match": {"cust": "q"}}, {"$count": "total"}]) == []
    assert run_pipeline(ORDERS, []) == ORDERS


def test_pipeline_output_does_not_alias_input() -> None:
    docs = [{"_id": 1, "a": {"b": 1}}]
    result = run_pipeline(docs, [{"$match": {}}])
    result[0]["a"]["b"] = 2
    assert docs == [{"_id": 1, "a": {"b": 1}}]


def test_unknown_stage_is_unrecognized_pipeline_stage() -> None:
    exc = error(run_pipeline, ORDERS, [{"$match": {}}, {"$lookup": {}}])
    assert (exc.code, exc.code_name, exc.message) == (
        40324,
        "UnrecognizedPipelineStage",
        "Unrecognized pipeline stage name: '$lookup'",
    )


@pytest.mark.parametrize(
    ("pipeline", "code"),
    [
        ({"$match": {}}, 14),
        ([{"$match": {}, "$limit": 1}], 40323),
        ([{"$limit": 0}], 15958),
        ([{"$skip": -1}], 15956),
        ([{"$sort": {}}], 15976),
        ([{"$count": "a.b"}], 40156),
        ([{"$project": {}}], 2),
        ([{"$group": {"n": {"$sum": 1}}}], 15955),
        ([{"$group": {"_id": 1, "n": {"$median": 1}}}], 15952),
        ([{"$group": {"_id": 1, "n": 1}}], 40234),
        ([{"$group": {"_id": 1, "n": {"$sum": 1, "$max": 1}}}], 40238),
        ([{"$group": {"_id": 1, "a.b": {"$sum": 1}}}], 40235),
        ([{"$group": {"_id": {"$toUpper": "$a"}}}], 168),
        ([{"$match": {"a": {"$foo": 1}}}], 2),
    ],
)
def test_malformed_pipelines_raise_even_without_documents(pipeline: Any, code: int) -> None:
    assert error(run_pipeline, [], pipeline).code == code


# --- properties ------------------------------------------------------------------------------

field_names = st.text(
    alphabet=st.characters(exclude_characters=".$\x00", exclude_categories=("Cs",)),
    min_size=1,
    max_size=4,
)
bson_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1).map(Int64),
    st.floats(),
    st.decimals(allow_nan=False, places=2, min_value=-(10**6), max_value=10**6).map(
        lambda d: Decimal128(str(d))
    ),
    st.just(Decimal128("NaN")),
    st.text(max_size=4),
    st.binary(max_size=3),
    st.binary(max_size=3).map(lambda data: Binary(data, 4)),
    st.binary(min_size=12, max_size=12).map(ObjectId),
    st.datetimes(),
    st.builds(Timestamp, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    st.builds(Regex, st.from_regex(r"[a-c]{0,2}", fullmatch=True), st.sampled_from(["", "i"])),
    st.just(MinKey()),
    st.just(MaxKey()),
)
bson_values = st.recursive(
    bson_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(field_names, children, max_size=3)
    ),
    max_leaves=8,
)
documents = st.dictionaries(field_names, bson_values, max_size=4)


@given(bson_values, bson_values)
def test_compare_is_reflexive_and_antisymmetric(a: Any, b: Any) -> None:
    assert compare(a, a) == 0
    assert compare(a, b) == -compare(b, a)


@given(st.lists(bson_values, max_size=8))
def test_compare_is_a_total_order_consistent_with_sorting(values: list[Any]) -> None:
    ordered = sorted(values, key=cmp_to_key(compare))
    for i, low in enumerate(ordered):
        for high in ordered[i + 1 :]:
            assert compare(low, high) <= 0


@given(documents)
def test_every_top_level_field_of_a_document_matches_it(doc: dict[str, Any]) -> None:
    for key, value in doc.items():
        assert matches(doc, {key: value})
        assert matches(doc, {key: {"$eq": value}})
        assert matches(doc, {key: {"$exists": True}})
        assert not matches(doc, {key: {"$ne": value}})


@given(documents, bson_values)
def test_set_then_match_and_arguments_untouched(doc: dict[str, Any], value: Any) -> None:
    before = copy.deepcopy(doc)
    result = apply_update(doc, {"$set": {"field": value}})
    assert compare(doc, before) == 0 and list(doc) == list(before)
    assert matches(result, {"field": value})
    assert [key for key in result if key != "field"] == [key for key in doc if key != "field"]


@given(st.lists(st.dictionaries(st.just("v"), bson_scalars), max_size=8))
def test_sorted_documents_are_in_compare_order(docs: list[dict[str, Any]]) -> None:
    result = sort_documents(docs, {"v": 1})
    keys = [doc.get("v") for doc in result]
    assert all(compare(a, b) <= 0 for a, b in itertools.pairwise(keys))
    assert sorted(map(id, result)) == sorted(map(id, docs))


def test_collation_strength_decides_string_equality_and_order() -> None:
    docs = [{"x": "pINg"}, {"x": "ping"}, {"x": "péng"}, {"x": "PONG"}]
    match = compile_filter({"x": "PING"})
    assert [d for d in docs if match(d)] == []
    with collation({"locale": "en_US", "strength": 2}):
        assert [d["x"] for d in docs if match(d)] == ["pINg", "ping"]
        assert [d["x"] for d in sort_documents(docs, {"x": 1})][-1] == "PONG"
    with collation({"locale": "fr", "strength": 1}):
        assert compare("péng", "PENG") == 0
    with collation({"locale": "en_US", "strength": 3}):
        assert [d for d in docs if match(d)] == []
    assert error(lambda: collation({"strength": 2}).__enter__()).code == 2
