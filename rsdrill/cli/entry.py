"""The `rsdrill` console script's entry point.

Ctrl-C while Python is still importing the CLI must not print a traceback: until the command
takes over, SIGINT ends the process quietly with status 130 (nothing has been injected yet).
This module imports nothing heavy, so that handler is in place within milliseconds.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED = 130


def quiet_exit(signum: int, frame: FrameType | None) -> None:
    """SIGINT while nothing has been built or injected: end at once with status 130.

    A raised KeyboardInterrupt is not safe there: it can land inside a library that turns it
    into another error (pydantic's schema building reports it as a SchemaError) or drops it,
    and the run would then go on as if Ctrl-C had never been pressed."""
    os._exit(INTERRUPTED)


def main() -> None:
    """Run the CLI; an interrupt outside a run exits 130 with one line, not a traceback."""
    # Started with SIGINT ignored (a background job): leave it so, as Python itself does.
    interruptible = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    if interruptible:
        signal.signal(signal.SIGINT, quiet_exit)
    from rsdrill.cli.app import app

    if interruptible:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    from rsdrill.cli.logs import rendered_to

    try:
        with rendered_to(sys.stderr):
            app()
    except KeyboardInterrupt:
        sys.stderr.write("rsdrill: interrupted\n")
        sys.exit(INTERRUPTED)
