"""The injector protocol: one fault on one platform.

`describe()` says what will happen (no side effects); `revert_action()` is written to the
journal *before* `inject()` so that `rsdrill recover` can undo the fault if the run dies;
`verify()` confirms the fault really landed before its clock is trusted; `revert()` undoes it.
An injector whose platform judges the fault itself (a Litmus ChaosResult) may also have
`report() -> dict`, merged into the fault's `detail` in the result once it is reverted.
"""

from __future__ import annotations

from typing import Any, Protocol


class InjectionError(Exception):
    """The platform refused or failed to apply or revert a fault."""


class Injector(Protocol):
    kind: str
    target: str

    def describe(self) -> str: ...

    def revert_action(self) -> dict[str, Any] | None: ...

    def inject(self) -> None: ...

    def verify(self, timeout_s: float) -> bool: ...

    def revert(self) -> None: ...
