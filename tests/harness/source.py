"""Python source parsed for the tests that read rsdrill's own code."""

from __future__ import annotations

import ast
import gc


def parse(source: str) -> ast.Module:
    """`ast.parse`, safe beside other threads. CPython 3.11 keeps the AST builder's recursion
    counter per interpreter: another thread parsing meanwhile (the traceback module parses the
    failing line of every traceback it formats) resets it, and the builder fails with
    "SystemError: AST constructor recursion depth mismatch" (CI once). The builder runs no
    Python code, so no other thread can run in the middle of it, except through finalizers
    called by a garbage collection it triggers: none while collection is off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()
