"""mongodb-fail-command: MongoDB's `failCommand` fail point, the same on every platform."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec, Way
from rsdrill.fields import Duration, FieldProblem
from rsdrill.fields import format_duration as _secs


class FailCommandFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "mongodb-fail-command",
        "MongoDB's `failCommand` fail point on the member for `duration` (or `times` "
        "commands), then mode off (any platform; a real mongod needs enableTestCommands)",
        fields_doc="`commands` (names), `error_code`, `error_labels`, `close_connection`, "
        "`block_time` (blockConnection), `times`, `app_name`",
        way=Way("configureFailPoint failCommand, then mode off"),
        server_privileges=(("configureFailPoint", "hostManager"),),
        needs_test_commands=True,
        drawn={"commands": ["insert"], "error_code": 91},
    )

    kind: Literal["mongodb-fail-command"]
    commands: tuple[Annotated[str, Field(min_length=1)], ...] = Field(
        ("insert",), min_length=1, description="mongodb-fail-command: the commands that fail"
    )
    error_code: int | None = Field(
        None, description="mongodb-fail-command: the error code they answer with (e.g. 91)"
    )
    error_labels: tuple[str, ...] | None = Field(
        None, description="mongodb-fail-command: the error labels (default: the server's)"
    )
    close_connection: bool = Field(
        False, description="mongodb-fail-command: drop the connection instead of answering"
    )
    block_time: Duration | None = Field(
        None, description="mongodb-fail-command: hold each command this long (blockConnection)"
    )
    times: int | None = Field(
        None, ge=1, description="mongodb-fail-command: fail this many commands, then stop"
    )
    app_name: str | None = Field(
        None, description="mongodb-fail-command: only connections of this appName"
    )

    def check(self) -> None:
        if self.duration is None and self.times is None:
            raise FieldProblem(("duration",), "mongodb-fail-command needs `duration` or "
                               "`times` (else it outlives the run)")  # fmt: skip
        if self.error_code is None and not self.close_connection and self.block_time is None:
            raise FieldProblem(("error_code",), "mongodb-fail-command needs error_code, "
                               "close_connection or block_time: it does nothing")  # fmt: skip

    def takes_member_down(self) -> bool:
        return False

    def plan_words(self, platform: str) -> str:
        how = [f"error {self.error_code}"] if self.error_code is not None else []
        how += ["drop the connection"] if self.close_connection else []
        how += [f"hold {_secs(self.block_time)}"] if self.block_time is not None else []
        times = f", {self.times} times" if self.times is not None else ""
        return self.lasting(f"failCommand: {'/'.join(self.commands)} → {', '.join(how)}{times}")

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"set the fail point off on {them}"
