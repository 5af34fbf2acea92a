"""A local control plane for a session or a module: started, handed out, stopped.

The session's shared one (conftest's ``cluster``) and the modules that need their own
(``test_faults`` stops its components, ``test_shadow`` runs the extender in shadow
mode) start it the same way: skipped only when GPUROSTER_SKIP_E2E=1, otherwise a
cluster that cannot start is an error, and its logs are kept when a test that used it
failed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

from extender.localcluster import Cluster, binaries_dir


def say(request: pytest.FixtureRequest, line: str) -> None:
    """Print past pytest's output capture."""
    plugins = request.config.pluginmanager
    reporter: Any = plugins.get_plugin("terminalreporter")
    capman: Any = plugins.get_plugin("capturemanager")
    if reporter is None:
        return
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        reporter.ensure_newline()
        reporter.write_line(line)


@contextlib.contextmanager
def running(request: pytest.FixtureRequest, label: str, **options: Any) -> Iterator[Cluster]:
    """A control plane (`Cluster` with `options`) up for the with-block; its lines in
    the test output start with [label]."""
    if os.environ.get("GPUROSTER_SKIP_E2E") == "1":
        pytest.skip("GPUROSTER_SKIP_E2E=1: not starting the local Kubernetes control plane")
    c = Cluster(bin_dir=binaries_dir(build=True), **options)
    c.up()
    say(request, f"[{label}] control plane Ready in {c.startup_seconds:.1f}s (apiserver "
        f"{c.server}, extender port {c.extender_port}, logs {c.log_dir})")
    failed_before = request.session.testsfailed
    try:
        yield c
    finally:
        failed = request.session.testsfailed > failed_before
        c.down(remove=not failed)
        if failed:
            say(request, f"[{label}] tests failed: cluster logs kept in {c.log_dir}")
