"""Update oplog entries as mongod writes them: a `$v: 2` diff of the document, not the document.

mongod (5.0+) logs an operator or pipeline update as `{$v: 2, diff: {...}}` with the document's
`_id` in `o2`, and a replacement as the whole new document. The diff's sections: `u` fields whose
value changed, `i` fields inserted (appended, in order; an existing field listed there moves to
the end), `d` fields deleted, and `s<field>` a sub-diff of an embedded document or of an array
(`a: true`, `u<index>` elements set, `l` the new length of an array cut short). The size matters
to what rsdrill measures: a one-field update of a 1 KB document is a ~100-byte entry, so an
oplog of a given size holds as many seconds of writes as mongod's would.
"""

from __future__ import annotations

from typing import Any

Document = dict[str, Any]


def update_entry(old: Document, new: Document, replacement: bool) -> Document:
    """The `o` of the update entry that turns `old` into `new`: the diff, or for a replacement
    the new document itself."""
    if replacement:
        return new
    return {"$v": 2, "diff": diff(old, new)}


def is_diff(o: Document) -> bool:
    """Whether an update entry's `o` is a diff (else it is the replacement document)."""
    return o.get("$v") == 2 and "diff" in o


def diff(old: Document, new: Document) -> Document:
    """The diff that `apply` turns from `old` into `new`, field order included."""
    out: Document = {}
    updated: Document = {}
    inserted: Document = {}
    deleted = {key: False for key in old if key not in new}
    in_place = [key for key in old if key in new]  # old fields that stay, in old order
    position = 0
    for key, value in new.items():
        if not inserted and position < len(in_place) and in_place[position] == key:
            position += 1  # still in its old place
            before = old[key]
            if _same(before, value):
                continue
            if isinstance(before, dict) and isinstance(value, dict):
                out[f"s{key}"] = diff(before, value)
            elif isinstance(before, list) and isinstance(value, list):
                out[f"s{key}"] = _array_diff(before, value)
            else:
                updated[key] = value
        else:  # a new field, or the order changed here: this and every later field go last
            inserted[key] = value
    sections = {"d": deleted, "u": updated, "i": inserted}
    return {name: fields for name, fields in sections.items() if fields} | out


def _array_diff(old: list[Any], new: list[Any]) -> Document:
    out: Document = {"a": True}
    if len(new) < len(old):
        out["l"] = len(new)
    for index, value in enumerate(new):
        if index >= len(old) or _same(old[index], value):
            if index >= len(old):
                out[f"u{index}"] = value
            continue
        before = old[index]
        # An element that stays a document or an array changes by a sub-diff, as in mongod's.
        if isinstance(before, dict) and isinstance(value, dict):
            out[f"s{index}"] = diff(before, value)
        elif isinstance(before, list) and isinstance(value, list):
            out[f"s{index}"] = _array_diff(before, value)
        else:
            out[f"u{index}"] = value
    return out


def apply(doc: Document, delta: Document) -> Document:
    """`doc` with the diff applied (a new document; `doc` is left as it was)."""
    out = {key: value for key, value in doc.items() if key not in delta.get("d", {})}
    out.update(delta.get("u", {}))
    for name, sub in delta.items():
        if name.startswith("s"):
            field = name[1:]
            out[field] = _apply_array(out[field], sub) if sub.get("a") else apply(out[field], sub)
    for key, value in delta.get("i", {}).items():
        out.pop(key, None)
        out[key] = value
    return out


def _apply_array(items: list[Any], delta: Document) -> list[Any]:
    out = list(items[: delta.get("l", len(items))])
    for name, value in delta.items():
        if name.startswith("u"):
            index = int(name[1:])
            out.extend([None] * (index + 1 - len(out)))
            out[index] = value
        elif name.startswith("s"):
            index = int(name[1:])
            element = out[index]
            out[index] = _apply_array(element, value) if value.get("a") else apply(element, value)
    return out


def describe(delta: Document, *, disambiguate: bool = False) -> Document:
    """The `updateDescription` of a change stream's `update` event for the diff; with
    `disambiguate` (showExpandedEvents), `disambiguatedPaths` too: each path whose dotted form
    could be read two ways (a field named like a number, or with a dot in its name) as its
    parts, array indices as integers."""
    updated: Document = {}
    removed: list[str] = []
    truncated: list[Document] = []
    parts: dict[str, list[str | int]] = {}
    _describe(delta, [], updated, removed, truncated, parts)
    description = {"updatedFields": updated, "removedFields": removed, "truncatedArrays": truncated}
    if disambiguate:
        ambiguous = {
            path: path_parts
            for path, path_parts in parts.items()
            if any(isinstance(p, str) and (p.isdigit() or "." in p) for p in path_parts)
        }
        if ambiguous:
            description["disambiguatedPaths"] = ambiguous
    return description


def _describe(
    delta: Document,
    at: list[str | int],
    updated: Document,
    removed: list[str],
    truncated: list[Document],
    parts: dict[str, list[str | int]],
) -> None:
    """A document's diff at path `at` (or, with `a`, an array's: its names are indices)."""

    def dotted(path: list[str | int]) -> str:
        parts[text := ".".join(str(p) for p in path)] = path
        return text

    array = bool(delta.get("a"))
    if array:
        if "l" in delta:
            truncated.append({"field": dotted(at), "newSize": delta["l"]})
        for key, value in delta.items():
            if key.startswith("u"):
                updated[dotted([*at, int(key[1:])])] = value
    else:
        removed += [dotted([*at, key]) for key in delta.get("d", {})]
        for section in ("u", "i"):
            for key, value in delta.get(section, {}).items():
                updated[dotted([*at, key])] = value
    for name, sub in delta.items():
        if name.startswith("s"):
            step: str | int = int(name[1:]) if array else name[1:]
            _describe(sub, [*at, step], updated, removed, truncated, parts)


def _same(a: Any, b: Any) -> bool:
    """Equal as BSON sees it: the same types, and embedded documents in the same field order
    (Python's == takes 1 == 1.0 == True and {a, b} == {b, a})."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
