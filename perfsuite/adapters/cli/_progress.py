"""Progress of long commands: one rewritten line on a terminal, plain lines in CI logs."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, tty: bool | None = None, min_interval_s: float = 0.0) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._width = 0

    def update(self, text: str) -> None:
        now = time.monotonic()
        if not self.tty and now - self._last < self.min_interval_s:
            return
        self._last = now
        if self.tty:
            self.stream.write("\r" + text + " " * (self._width - len(text)))  # blanks the rest of a longer line
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.flush()
