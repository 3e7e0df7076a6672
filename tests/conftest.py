"""Suite-wide settings: every pass pipeline verifies the graph after each step
(rlx.passes.pipeline), so a pass that builds a malformed graph is named where it did it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from rlx.passes.pipeline import verifying_passes


@pytest.fixture(autouse=True)
def _verified_passes() -> Iterator[None]:
    """Every test's pipelines verify the graph after each pass (`verifying_passes`)."""
    with verifying_passes():
        yield


# engines keep caches (auto's choice, onnxruntime's prepacked models) in the user's cache
# folder: the suite (and the processes it starts) keeps its own, never the user's
# folder, deleted when the suite ends (it holds over a gigabyte by then)
if "RLX_TEST_KEEP_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="rlx-test-cache-")
    atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)
