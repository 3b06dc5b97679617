"""Collection validators: `validator`, `validationLevel` and `validationAction` of create and
collMod, checked as mongod checks them before a document is written on the primary.

A validator is a query filter (the emulator's own matcher); `$jsonSchema` is refused when the
validator is set rather than accepted and never enforced. A document that fails is a write
error 121 (DocumentValidationFailure) whose errInfo names the document and the validator,
unless the action is `warn` (mongod logs it and writes), the level is `off`, or the level is
`moderate` and the document already failed before the update. `bypassDocumentValidation`
skips the check."""

from __future__ import annotations

from typing import Any

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.query import compile_filter
from rsdrill_emulator.values import QueryError

OPTIONS = ("validator", "validationLevel", "validationAction")
LEVELS = ("off", "strict", "moderate")
ACTIONS = ("error", "warn")


def options_of(body: dict[str, Any]) -> dict[str, Any]:
    """The validation options a create or collMod command sets, checked (CommandError)."""
    given = {name: body[name] for name in OPTIONS if name in body}
    validator = given.get("validator")
    if "validator" in given:
        if not isinstance(validator, dict):
            raise CommandError(14, "'validator' must be an object")
        if "$jsonSchema" in validator:
            raise CommandError(72, "$jsonSchema validators are not supported by the sandbox")
        try:
            compile_filter(validator)
        except QueryError as exc:
            raise CommandError(exc.code, f"invalid validator: {exc}") from None
    if given.get("validationLevel", "strict") not in LEVELS:
        raise CommandError(2, f"validationLevel must be one of {', '.join(LEVELS)}")
    if given.get("validationAction", "error") not in ACTIONS:
        raise CommandError(2, f"validationAction must be one of {', '.join(ACTIONS)}")
    return given


def failure(
    options: dict[str, Any], new: dict[str, Any], old: dict[str, Any] | None = None
) -> QueryError | None:
    """Why writing `new` (replacing `old`, if an update) breaks the collection's validator, or
    None when it may be written."""
    validator = options.get("validator")
    level = options.get("validationLevel", "strict")
    if not validator or level == "off":
        return None
    valid = compile_filter(validator)
    if valid(new):
        return None
    if level == "moderate" and old is not None and not valid(old):
        return None  # moderate: documents that were already invalid may still be updated
    if options.get("validationAction", "error") == "warn":
        return None
    info = {"failingDocumentId": new.get("_id"), "details": {"validator": validator}}
    return QueryError(121, "Document failed validation", {"errInfo": info})
