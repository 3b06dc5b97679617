"""The game-day console: a terminal that confirms each fault before it goes in and takes a
keypress to revert early or abort (`rsdrill run --interactive`).

One thread owns the terminal's input, in cbreak mode (keys arrive one at a time, unechoed),
so a key pressed while nothing is asked still reaches the run: `r` reverts the faults in
force now, `a` aborts. The terminal's settings are restored when the console stops.
"""

from __future__ import annotations

import os
import select
import termios
import threading
import tty
from collections.abc import Callable
from typing import Any, TextIO

KEYS_HELP = "keys: r revert the faults in force now, a abort the run"
POLL_S = 0.1


class GameDayConsole:
    """Questions and keys on the terminal whose input is `fd` (prompts go to `stream`)."""

    def __init__(self, fd: int, stream: TextIO) -> None:
        self.fd = fd
        self.stream = stream
        self._saved: list[Any] | None = None
        self._on_key: Callable[[str], None] = lambda _key: None
        self._answer: str | None = None
        self._choices = ""
        self._answered = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read_keys, name="rsdrill-keys", daemon=True)

    def start(self, on_key: Callable[[str], None]) -> None:
        """Take the terminal; `on_key` gets every key pressed while no question is open."""
        self._on_key = on_key
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)
        self._thread.start()
        self._say(KEYS_HELP)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2 * POLL_S + 1)
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def ask(self, question: str, choices: str, cancelled: threading.Event) -> str | None:
        """The key among `choices` the user pressed; None once `cancelled` is set."""
        with self._answered:
            self._answer, self._choices = None, choices
            self._say(f"{question} ")
            while self._answer is None and not cancelled.is_set():
                self._answered.wait(POLL_S)
            answer, self._choices = self._answer, ""
        return answer

    def _read_keys(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], POLL_S)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 1)
            except OSError:
                return
            if not data:
                return  # the terminal is gone: nothing more will be pressed
            key = data.decode(errors="replace").lower()
            with self._answered:
                if self._choices:
                    if key in self._choices:
                        self._answer = key
                        self._answered.notify_all()
                    continue
            self._on_key(key)

    def _say(self, text: str) -> None:
        self.stream.write(("\r\x1b[2K" if self.stream.isatty() else "") + text + "\n")
        self.stream.flush()
