"""How the command line shows what the library logs (`rsdrill.*` loggers): one line per record
on stderr, a run's events with the run's clock (`t+   5.02s injected host-kill on ...`), as
rsdrill has always printed them. On a terminal a line first clears the live status line."""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rsdrill.redact import redact_uri

LIBRARY_LOGGER = "rsdrill"


class LogLines(logging.Handler):
    """Renders each record as the one line a user reads."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.tty = stream.isatty()

    def emit(self, record: logging.LogRecord) -> None:
        t_s = getattr(record, "run_t_s", None)
        line = f"t+{t_s:7.2f}s " if t_s is not None else ""
        line += record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line += f": {type(error).__name__}: {error}"
        line = redact_uri(line)  # a message may quote the URI
        self.stream.write(("\r\x1b[2K" + line + "\n") if self.tty else line + "\n")
        self.stream.flush()


@contextmanager
def rendered_to(stream: TextIO) -> Iterator[LogLines]:
    """While inside, the library's INFO and above are lines on `stream` (and nowhere else)."""
    logger = logging.getLogger(LIBRARY_LOGGER)
    handler = LogLines(stream)
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
