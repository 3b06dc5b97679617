"""The sandbox's one error: a failure reported to the user in one line, with its exit code."""

from __future__ import annotations

from rsdrill.errors import RsdrillError


class SandboxError(RsdrillError):
    """A failure reported to the user in one line.

    `exit_code` 2: bad input or a refusal, nothing was changed; 4: the platform failed (a member
    did not start, a process would not die).
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
