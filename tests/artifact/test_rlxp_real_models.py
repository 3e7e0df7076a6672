"""The six real models (../shared/MODELS.md) baked once, written as .rlx and as .rlxp in
every container and storage tier: every package runs to outputs byte-identical to the .rlx
of the same bake (and the .rlx matches onnxruntime, tests/test_real_models.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import read_rlx, read_rlxp, write_rlx, write_rlxp
from rlx.onnx import import_onnx
from rlx.runtime import Session
from tests.real_models import FEEDS, fetch, import_kwargs

pytestmark = pytest.mark.slow

CONTAINERS = {"flat": "m.rlxp", "zip": "m.rlxp.zip", "dir": "m-dir"}


def run(file, feeds) -> list[np.ndarray]:
    return Session().compile(file.into_runtime_graph()).run(feeds)


@pytest.mark.parametrize("name", sorted(FEEDS))
@pytest.mark.parametrize("profile", [BakeProfile.EXACT, BakeProfile.SIZE])
def test_packages_run_like_the_rlx(tmp_path, name, profile):
    path = fetch(name)
    graph, bindings = import_onnx(path, **import_kwargs(path))
    file, _ = bake(graph, bindings, BakeOptions.from_profile(profile))
    write_rlx(tmp_path / "m.rlx", file)
    feeds = FEEDS[name](0)
    expected = run(read_rlx(tmp_path / "m.rlx"), feeds)
    for container, out in CONTAINERS.items():
        for tier in ("hot", "warm", "cold"):
            write_rlxp(tmp_path / out, file, container, tier=tier)
            got = run(read_rlxp(tmp_path / out, verify="full"), feeds)
            assert len(got) == len(expected)
            for a, b in zip(got, expected):
                assert a.dtype == b.dtype and a.shape == b.shape
                assert a.tobytes() == b.tobytes(), (name, container, tier)
