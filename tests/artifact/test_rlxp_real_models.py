"""The six real models (../shared/MODELS.md) baked once, serialised as .rlx (in memory: the
bytes write_rlx writes; the real models' .rlx files on disk are tests/engines/
test_real_models.py's) and written as .rlxp in every container, each in one storage tier:
every package runs to outputs byte-identical to the .rlx of the same bake (and the .rlx
matches onnxruntime, tests/test_real_models.py).

The tiers rotate over the containers from case to case (a Latin square), so the twelve
cases write each (container, tier) pair as often (four times), a third of the disk of every pair in
every case; every pair on every memory mode and profile is tests/artifact/test_rlxp.py's."""

from __future__ import annotations

import numpy as np
import pytest

from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import parse_rlx, read_rlxp, write_rlxp
from rlx.artifact.writer import iter_rlx_bytes
from rlx.onnx import import_onnx
from rlx.runtime import Session
from tests.real_models import FEEDS, fetch, import_kwargs

pytestmark = pytest.mark.slow

CONTAINERS = {"flat": "m.rlxp", "zip": "m.rlxp.zip", "dir": "m-dir"}
TIERS = ("hot", "warm", "cold")
PROFILES = (BakeProfile.EXACT, BakeProfile.SIZE)
WRITE_BUDGET = 400 << 20  # 0.36 GB: each bake of the six models as three packages


def tier_per_container(name: str, profile: BakeProfile) -> dict[str, str]:
    """Each container with a different tier, shifted by one from case to case."""
    shift = sorted(FEEDS).index(name) + PROFILES.index(profile)
    return {c: TIERS[(i + shift) % len(TIERS)] for i, c in enumerate(CONTAINERS)}


def run(file, feeds) -> list[np.ndarray]:
    return Session().compile(file.into_runtime_graph()).run(feeds)


@pytest.mark.parametrize("name", sorted(FEEDS))
@pytest.mark.parametrize("profile", PROFILES)
def test_packages_run_like_the_rlx(tmp_path, name, profile):
    path = fetch(name)
    graph, bindings = import_onnx(path, **import_kwargs(path))
    file, _ = bake(graph, bindings, BakeOptions.from_profile(profile))
    data = bytearray()  # the .rlx as write_rlx writes it, made in memory
    for piece in iter_rlx_bytes(file):
        data += piece
    feeds = FEEDS[name](0)
    expected = run(parse_rlx(data, verify="full"), feeds)
    for container, tier in tier_per_container(name, profile).items():
        out = tmp_path / CONTAINERS[container]
        write_rlxp(out, file, container, tier=tier)
        got = run(read_rlxp(out, verify="full"), feeds)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes(), (name, container, tier)


def test_the_cases_write_every_container_in_every_tier():
    pairs = [(c, t) for name in FEEDS for profile in PROFILES
             for c, t in tier_per_container(name, profile).items()]
    assert set(pairs) == {(c, t) for c in CONTAINERS for t in TIERS}
    assert len({pairs.count(p) for p in set(pairs)}) == 1  # as often as each other
