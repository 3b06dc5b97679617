"""Ctrl-C before anything has been built or injected: the process ends at once, status 130.

A raised KeyboardInterrupt is not safe there: it can land inside a library that turns it into
another error (pydantic's schema building reports it as a SchemaError) or drops it, and the run
would then go on as if Ctrl-C had never been pressed. This module imports nothing heavy: the
console script installs the handler within milliseconds of starting.
"""

import os
import signal
import threading
from types import FrameType

INTERRUPTED = 130


def quiet_exit(signum: int, frame: FrameType | None) -> None:
    """SIGINT's handler while nothing is there to undo."""
    os._exit(INTERRUPTED)


def exit_on_interrupt() -> bool:
    """Make SIGINT end the process quietly (130), unless it was started ignoring SIGINT (a
    background job) or this is not the main thread; says whether the handler is in place."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return False
    signal.signal(signal.SIGINT, quiet_exit)
    return True


def interrupt_raises() -> None:
    """From here on Ctrl-C raises KeyboardInterrupt (commands that clean up after themselves),
    where `exit_on_interrupt` had made it end the process."""
    if signal.getsignal(signal.SIGINT) is quiet_exit:
        signal.signal(signal.SIGINT, signal.default_int_handler)
