"""Injectable time: the loop and the step numbering read it, tests move it."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


def wall_time(t: float, step_seconds: float) -> str:
    """`t` as a user reads it in a reason: HH:MM, with seconds when steps are shorter."""
    fmt = "%H:%M" if step_seconds >= 60 else "%H:%M:%S"
    return datetime.fromtimestamp(t, UTC).strftime(fmt)


class Clock(Protocol):
    def now(self) -> float: ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait up to `seconds` of this clock's time for `event`; True if it was set."""
        ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


class FakeClock:
    """Time moves only when a test calls `advance`."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start
        self._cond = threading.Condition()
        # (event, seconds) of every wait begun, recorded once its deadline is fixed: a
        # test that sees a wait here can move the clock past it without a race.
        self.waits: list[tuple[threading.Event, float]] = []

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        with self._cond:
            self.t += seconds
            self._cond.notify_all()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        with self._cond:
            deadline = self.t + seconds
            self.waits.append((event, seconds))
            while not event.is_set() and self.t < deadline:
                self._cond.wait(0.05)
        return event.is_set()
