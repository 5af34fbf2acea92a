"""Settings for the whole unit suite."""

from __future__ import annotations

from hypothesis import settings

# Hypothesis fails an example that takes over 200 ms (its default deadline), and calls
# the test flaky when the replay is quicker: on a machine busy with other work that is a
# timing of the machine, not of the code. No deadline; a hung test is pytest-timeout's.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
