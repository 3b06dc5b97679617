"""Client commands: what each one means for a member, with MongoDB's reply shapes and errors.

One module per family; each handler registers itself with `@command` (base.py) when its module
is imported, so importing this package registers them all."""

from rsdrill_emulator.commands import (  # noqa: F401 (their handlers register)
    admin,
    catalog,
    handshake,
    integrity,
    reads,
    replication,
    writes,
)
from rsdrill_emulator.commands.base import Request
from rsdrill_emulator.commands.dispatcher import Commands, keep_cursors_bounded

__all__ = ["Commands", "Request", "keep_cursors_bounded"]
