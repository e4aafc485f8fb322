"""A progress line on stderr: redrawn in place on a terminal, one line per step otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, title: str, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.title, self.total, self.done = title, max(total, 1), 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.start = time.perf_counter()

    def step(self, label: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 24
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "-" * (width - filled)
        text = (
            f"{self.title} [{bar}] {self.done}/{self.total} {time.perf_counter() - self.start:5.1f}s {label}"
        )
        if self.tty:
            self.stream.write("\r" + text[:110].ljust(110))
            if self.done >= self.total:
                self.stream.write("\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
