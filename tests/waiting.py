"""Waiting for what another thread or process does: on the condition itself, with a deadline.

A test that sleeps a fixed time and then looks is a race the machine's load decides;
one that waits for a different condition is a race the code's order decides. Wait for
the very thing the assertion reads, and fail with what did not happen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from extender.localcluster import waiting


def wait_until(pred: Callable[[], Any], timeout: float = 10.0, *, what: str) -> Any:
    """`pred()`'s first truthy value; past `timeout` s, AssertionError naming `what`.

    The e2e tests' `wait_for`, polled every 10 ms since the unit tests' threads act in
    microseconds. The deadline is generous on purpose: a passing test never reaches it,
    and a test run on a loaded machine must not fail by it.
    """
    return waiting.wait_for(pred, timeout, what, every=0.01)
