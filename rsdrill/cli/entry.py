"""The `rsdrill` console script's entry point.

Ctrl-C while Python is still importing the CLI must not print a traceback: until the command
takes over, SIGINT ends the process quietly with status 130 (nothing has been injected yet).
"""

from __future__ import annotations

import signal
import sys

from rsdrill.cli.interrupt import INTERRUPTED, exit_on_interrupt


def main() -> None:
    """Run the CLI; an interrupt outside a run exits 130 with one line, not a traceback."""
    interruptible = exit_on_interrupt()
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
