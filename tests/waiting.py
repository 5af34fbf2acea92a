"""Waiting for what another thread or process does: on the condition itself, with a deadline.

A test that sleeps a fixed time and then looks is a race the machine's load decides;
one that waits for a different condition is a race the code's order decides. Wait for
the very thing the assertion reads, and fail with what did not happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(pred: Callable[[], T], timeout: float = 10.0, *, what: str,
               every: float = 0.01) -> T:
    """`pred()`'s first truthy value, polled every `every` s; fails after `timeout` s.

    The deadline is generous on purpose: a passing test never reaches it, and a test
    run on a loaded machine must not fail by it.
    """
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
