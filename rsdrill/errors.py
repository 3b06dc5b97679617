"""rsdrill's exceptions: one hierarchy under `RsdrillError`, so a library user can catch what
rsdrill raises on purpose in one `except`. The ones raised low (a platform, a guard) and handled
high (the runner, the command line) are defined here; the others derive from `RsdrillError`
where they are raised (`rsdrill.ExperimentError` in the loader, `SandboxError`, `StepFailed`,
`SelectionError`, `StoreError`, ...)."""

from __future__ import annotations


class RsdrillError(Exception):
    """Anything rsdrill raises on purpose, with a message meant for the user."""


class TargetError(RsdrillError):
    """The target cannot be set up or reached; nothing was injected."""


class InjectionError(RsdrillError):
    """The platform refused or failed to apply or revert a fault."""


class GuardRefusal(RsdrillError):
    """A guard refused the run; nothing was injected."""

    def __init__(self, guard: str, reason: str) -> None:
        super().__init__(f"{guard} guard: {reason}")
        self.guard = guard
        self.reason = reason


class PlatformLoadError(RsdrillError):
    """A registered platform could not be loaded."""
