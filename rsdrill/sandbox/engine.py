"""What starts a sandbox's member processes (the emulator, or mongod where it is on PATH), and
what it reads of the set it starts them for."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from rsdrill.connection import ConnectOptions
from rsdrill.sandbox.config import MemberSpec, ReplSetSpec


class Layout(Protocol):
    """The set an engine starts members for: its spec, its directory, how to reach it (a
    `Sandbox` is one)."""

    directory: Path

    @property
    def spec(self) -> ReplSetSpec: ...

    @property
    def connect_options(self) -> ConnectOptions: ...


class Engine(Protocol):
    """What starts member processes and turns them into a replica set with a primary."""

    name: str
    executable: str

    def argv(self, sandbox: Layout, member: MemberSpec, *, init: bool) -> list[str]:
        """The command line of one member process."""
        ...

    def initiate(self, sandbox: Layout, deadline: float) -> None:
        """Make the freshly started set have a writable primary before `deadline` (monotonic)."""
        ...
