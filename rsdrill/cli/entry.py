"""The `rsdrill` console script's entry point.

Ctrl-C while Python is still importing the CLI must not print a traceback: until the command
takes over, SIGINT ends the process quietly with status 130 (nothing has been injected yet).
"""

import atexit
import codecs
import contextlib
import gc
import io
import os
import sys
from typing import Any, TextIO, cast

from rsdrill.cli.interrupt import INTERRUPTED, exit_on_interrupt


def main() -> None:
    """Run the CLI; an interrupt outside a run exits 130 with one line, not a traceback."""
    # The quiet exit holds until the command starts: `run` and `replay` keep it until the
    # runner's own handler is in place, the others go back to KeyboardInterrupt (app._root).
    exit_on_interrupt()
    _writes_any_text(sys.stdout)
    if sys.stdout is not None and sys.stderr is not None:
        sys.stdout = cast(TextIO, _ReaderMayGo(sys.stdout))
        sys.stderr = cast(TextIO, _ReaderMayGo(sys.stderr))
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


def _writes_any_text(stream: TextIO | None) -> None:
    """A stdout whose encoding cannot write every character (LANG=de_DE.ISO-8859-1, cp1252)
    writes what it cannot escaped (\\u2714), as Python's stderr does: `check`'s marks, `plan`'s
    arrows and `history`'s dashes were a UnicodeEncodeError traceback and exit 1, which CI
    reads as an SLO failed or, from `history --fail-on-regression`, a regression."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    if isinstance(stream, io.TextIOWrapper) and codecs.lookup(encoding).name != "utf-8":
        stream.reconfigure(errors="backslashreplace")


class _ReaderMayGo:
    """A standard stream whose reader may go away (`rsdrill run ... | head`, a CI log
    collector that died): past that, output goes to /dev/null. A BrokenPipeError raised from
    whichever print met it ended the command there, exit 1: a run skipped its teardown and
    its result files, and left its sandbox's members running for `rsdrill recover`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._to_devnull()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._to_devnull()

    def _to_devnull(self) -> None:
        # Over the descriptor itself, so that what is still buffered (and the interpreter's
        # flush at exit) goes there too.
        self._gone = True
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self._stream.fileno())
            finally:
                os.close(null)
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


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
