"""Polling for a condition the cluster reaches on its own time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.25) -> Any:
    """Call ``check`` until it returns something truthy, and return that.

    Raises AssertionError naming ``what`` once ``timeout`` seconds have passed.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
