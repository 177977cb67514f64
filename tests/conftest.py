"""Test-wide settings.

Hypothesis: under CI (``CI`` set) examples are derived from each test's name
(``derandomize``), so a CI run is reproducible; locally every run explores new examples.
The slow "explain" phase is skipped everywhere (its tracer multiplies shrink time).
"""

from __future__ import annotations

import os

from hypothesis import Phase, settings

_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
settings.register_profile("ci", derandomize=True, deadline=None, phases=_PHASES,
                          print_blob=True)
settings.register_profile("dev", deadline=None, phases=_PHASES, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
