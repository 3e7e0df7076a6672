"""Suite-wide settings: every pass pipeline verifies the graph after each step
(rlx.passes.pipeline), so a pass that builds a malformed graph is named where it did it."""

from __future__ import annotations

import os

os.environ.setdefault("RLX_VERIFY_PASSES", "1")
