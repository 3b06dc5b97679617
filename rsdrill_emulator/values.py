"""BSON values as MongoDB's query language sees them: the comparison order (with the collation
in force), truthiness, type names and numeric arithmetic, and `QueryError`, the error of a
malformed or inapplicable query, update or pipeline. The ground that the query language
(`query`), its expressions (`expressions`) and aggregation (`pipeline`) all stand on.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from decimal import Decimal, localcontext
from functools import cmp_to_key
from typing import Any

from bson.code import Code
from bson.datetime_ms import DatetimeMS
from bson.dbref import DBRef
from bson.decimal128 import Decimal128, create_decimal128_context
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

from rsdrill_emulator.errors import CODE_NAMES


class QueryError(Exception):
    """A malformed or inapplicable query, update or pipeline, with MongoDB's error code."""

    def __init__(self, code: int, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.code_name = CODE_NAMES.get(code, f"Location{code}")
        self.message = message
        # Fields the error reply carries besides code and message (DuplicateKey's keyValue).
        self.details = details or {}


class _Missing:
    """An absent field: compares and matches like null, but `$exists` tells them apart."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


_NUMBER, _STRING, _OBJECT, _ARRAY, _BOOL = 10, 15, 20, 25, 40


# MongoDB's canonical type brackets, checked in this order (bool before int, Code before str).
_BRACKETS: tuple[tuple[type | tuple[type, ...], int], ...] = (
    (MinKey, -1),
    ((type(None), _Missing), 5),
    (bool, _BOOL),
    ((int, float, Decimal128), _NUMBER),
    (Code, 60),
    (str, _STRING),
    ((dict, DBRef), _OBJECT),
    (list, _ARRAY),
    (bytes, 30),
    (ObjectId, 35),
    ((datetime, DatetimeMS), 45),
    (Timestamp, 47),
    ((Regex, re.Pattern), 50),
    (MaxKey, 127),
)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_REGEX_FLAG_LETTERS = (
    (re.IGNORECASE, "i"),
    (re.LOCALE, "l"),
    (re.MULTILINE, "m"),
    (re.DOTALL, "s"),
    (re.UNICODE, "u"),
    (re.VERBOSE, "x"),
)


def _sign(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


def _bracket(value: Any) -> int:
    """The canonical type bracket of a BSON value: values of different brackets never equal."""
    for types, bracket in _BRACKETS:
        if isinstance(value, types):
            return bracket
    raise TypeError(f"not a BSON value: {type(value).__name__}")


def compare(a: Any, b: Any) -> int:
    """Return -1, 0 or 1 ordering two BSON values the way MongoDB sorts them."""
    bracket = _bracket(a)
    if bracket != _bracket(b):
        return _sign(bracket, _bracket(b))
    if bracket == _NUMBER:
        return _compare_numbers(a, b)
    if bracket == _OBJECT:
        return _compare_documents(_as_dict(a), _as_dict(b))
    if bracket == _ARRAY:
        return _compare_arrays(a, b)
    if bracket == _STRING and (collate := _COLLATION.get()) is not None:
        return _sign(collate(a), collate(b))
    return _sign(_scalar_key(a), _scalar_key(b))


# The string comparison key of the collation in force (None: binary), see `collation`.
_COLLATION: ContextVar[Callable[[str], Any] | None] = ContextVar("collation", default=None)


def _base_letters(text: str) -> str:
    """`text` without case or accents: what a collation of strength 1 compares."""
    decomposed = unicodedata.normalize("NFD", text.casefold())
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def _strength_key(strength: int) -> Callable[[str], Any] | None:
    """Strength 1 ignores case and accents, 2 case only (accents order after base letters);
    3 and above tell them apart (the sandbox then compares code points, not the locale's
    order)."""
    if strength >= 3:
        return None
    if strength == 2:
        return lambda text: (_base_letters(text), text.casefold())
    return _base_letters


@contextmanager
def collation(spec: Any) -> Iterator[None]:
    """Compare strings under a command's `collation` while the block runs (matching, sorting
    and unique checks all go through `compare`). Only `strength` changes the outcome here."""
    if spec is None:
        yield
        return
    if not isinstance(spec, Mapping) or not isinstance(spec.get("locale"), str):
        raise QueryError(2, "a collation must be an object with a 'locale' string")
    strength = _as_int(spec.get("strength", 3))
    if strength is None or not 1 <= strength <= 5:
        raise QueryError(2, f"collation strength must be an integer from 1 to 5: {spec!r}")
    token = _COLLATION.set(None if spec["locale"] == "simple" else _strength_key(strength))
    try:
        yield
    finally:
        _COLLATION.reset(token)


def _as_dict(value: dict[str, Any] | DBRef) -> dict[str, Any]:
    return value.as_doc() if isinstance(value, DBRef) else value


def _to_number(value: Any) -> int | float | Decimal:
    return value.to_decimal() if isinstance(value, Decimal128) else value


def _is_nan(value: Any) -> bool:
    number = _to_number(value) if _bracket(value) == _NUMBER else 0
    return (isinstance(number, float) and math.isnan(number)) or (
        isinstance(number, Decimal) and number.is_nan()
    )


def _compare_numbers(a: Any, b: Any) -> int:
    """Numeric order across int, Int64, float and Decimal128; NaN sorts below every number."""
    a_nan, b_nan = _is_nan(a), _is_nan(b)
    if a_nan or b_nan:
        return int(b_nan) - int(a_nan)
    return _sign(_to_number(a), _to_number(b))


def _compare_documents(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Field by field: each field's type bracket, then its name, then its value."""
    for (key_a, value_a), (key_b, value_b) in zip(a.items(), b.items(), strict=False):
        result = (
            _sign(_bracket(value_a), _bracket(value_b))
            or _sign(key_a, key_b)
            or compare(value_a, value_b)
        )
        if result:
            return result
    return _sign(len(a), len(b))


def _compare_arrays(a: list[Any], b: list[Any]) -> int:
    for item_a, item_b in zip(a, b, strict=False):
        result = compare(item_a, item_b)
        if result:
            return result
    return _sign(len(a), len(b))


def _scalar_key(value: Any) -> Any:
    """A natively comparable key for a value of a non-container, non-number bracket."""
    if isinstance(value, bytes):  # MongoDB orders binary by length, then subtype, then bytes
        return (len(value), getattr(value, "subtype", 0), bytes(value))
    if isinstance(value, ObjectId):
        return value.binary
    if isinstance(value, (datetime, DatetimeMS)):
        return _millis(value)
    if isinstance(value, Timestamp):
        return (value.time, value.inc)
    if isinstance(value, (Regex, re.Pattern)):
        return (value.pattern, _regex_letters(value.flags))
    if isinstance(value, (str, bool)):
        return value
    return 0  # null, MinKey and MaxKey: one value per bracket


def _millis(value: datetime | DatetimeMS) -> int:
    if isinstance(value, DatetimeMS):
        return int(value)
    if value.tzinfo is None:  # bson decodes to naive UTC by default
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(milliseconds=1)


def _regex_letters(flags: int) -> str:
    return "".join(letter for flag, letter in _REGEX_FLAG_LETTERS if flags & flag)


_BSON_KEY = cmp_to_key(compare)


# $type codes and aliases; Int64 before int because it is a subclass.
_TYPES: tuple[tuple[type | tuple[type, ...], int, str], ...] = (
    (MinKey, -1, "minKey"),
    (type(None), 10, "null"),
    (bool, 8, "bool"),
    (Int64, 18, "long"),
    (int, 16, "int"),
    (float, 1, "double"),
    (Decimal128, 19, "decimal"),
    (Code, 13, "javascript"),
    (str, 2, "string"),
    ((dict, DBRef), 3, "object"),
    (list, 4, "array"),
    (bytes, 5, "binData"),
    (ObjectId, 7, "objectId"),
    ((datetime, DatetimeMS), 9, "date"),
    (Timestamp, 17, "timestamp"),
    ((Regex, re.Pattern), 11, "regex"),
    (MaxKey, 127, "maxKey"),
)


def _is_operator_object(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and next(iter(value)).startswith("$")


def _truthy(value: Any) -> bool:
    """MongoDB's truthiness of an operand: false, null and zero are false, all else is true."""
    if _is_number(value):
        return _to_number(value) != 0
    return value is not None and value is not False


_INT32 = range(-(2**31), 2**31)


def _is_number(value: Any) -> bool:
    return _bracket(value) == _NUMBER


def _type_name(value: Any) -> str:
    return next((alias for types, _, alias in _TYPES if isinstance(value, types)), "unknown")


def _add(a: Any, b: Any) -> Any:
    """a + b with MongoDB's result type: decimal > double > long > int (int overflows to long)."""
    if isinstance(a, Decimal128) or isinstance(b, Decimal128):
        with localcontext(create_decimal128_context()):
            return Decimal128(_to_decimal(a) + _to_decimal(b))
    if isinstance(a, float) or isinstance(b, float):
        return float(a) + float(b)
    total = int(a) + int(b)
    return Int64(total) if Int64 in (type(a), type(b)) or total not in _INT32 else total


def _to_decimal(value: Any) -> Decimal:
    if isinstance(value, Decimal128):
        return value.to_decimal()
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _as_int(value: Any) -> int | None:
    """`value` as an int if it is an integral int or float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value)
