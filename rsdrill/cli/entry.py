"""The `rsdrill` console script's entry point.

Ctrl-C while Python is still importing the CLI must not print a traceback: until the command
takes over, SIGINT ends the process quietly with status 130 (nothing has been injected yet).
"""

import atexit
import gc
import os
import sys

from rsdrill.cli.interrupt import INTERRUPTED, exit_on_interrupt


def main() -> None:
    """Run the CLI; an interrupt outside a run exits 130 with one line, not a traceback."""
    # The quiet exit holds until the command starts: `run` and `replay` keep it until the
    # runner's own handler is in place, the others go back to KeyboardInterrupt (app._root).
    exit_on_interrupt()
    # The analyses' NumPy never multiplies matrices: OpenBLAS's thread per core, started as
    # NumPy is imported, only cost each run ~75 ms of CPU (numpy 2.4 here: 195 -> 120 ms).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from rsdrill.cli.app import app
    from rsdrill.cli.logs import rendered_to

    try:
        with rendered_to(sys.stderr):
            app()
    except KeyboardInterrupt:
        sys.stderr.write("rsdrill: interrupted\n")
        sys.exit(INTERRUPTED)
    finally:
        _lighten_exit()


def _lighten_exit() -> None:
    """Spare the exit what it would do for nothing.

    pymongo's exit handler joins every client's background threads, and those of a client
    closed in the command's last half second sleep in 0.5 s steps before they see it: a run
    would linger ~0.5 s after its last line. They are daemon threads with nothing left to do.

    The collector's passes at shutdown walk every object the imports made (the models, the
    driver, NumPy): ~0.1 s of CPU per command, for memory the process is about to hand back.
    Frozen, they are skipped. What rsdrill writes is closed or committed before this (the
    journal by unbuffered writes), so no buffer waits on a collection to be flushed."""
    monitor = sys.modules.get("pymongo.synchronous.monitor")
    shutdown = getattr(monitor, "_shutdown_resources", None)
    if shutdown is not None:
        atexit.unregister(shutdown)
    gc.freeze()
