"""Integrity at scale: every bit of a small artifact, and 10,000 random bits of a large
one, flipped one at a time. A flip in the header fails at open; a flip in a blob fails at
open with verify="full" and at first use with verify="lazy"; a flip in the zero padding,
whose byte ranges are computed from the header, changes nothing (flips.py has the rules).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.hardening import flips, seeds

SMALL = seeds.artifacts()["mlp-exact-duplex"]  # graph and table blobs, f32 and packed


def test_regions_tile_the_file_and_padding_is_zero():
    regions = flips.Regions(SMALL)
    assert regions.spans[0][0] == 0 and regions.spans[-1][1] == len(SMALL)
    assert all(a[1] == b[0] for a, b in zip(regions.spans, regions.spans[1:]))
    padding = [(s, e) for s, e, kind in regions.spans if kind == flips.PADDING]
    assert len(padding) > 2  # after the header and between blobs
    assert all(not any(SMALL[s:e]) for s, e in padding)
    assert sum(regions.size(k) for k in (flips.HEADER, flips.BLOB, flips.PADDING)) == len(SMALL)


@pytest.mark.slow
def test_every_single_bit_flip_of_a_small_artifact():
    report = flips.flip_bits(SMALL, range(len(SMALL) * 8))
    assert report.wrong == []
    regions = flips.Regions(SMALL)
    for kind in (flips.HEADER, flips.BLOB, flips.PADDING):
        for mode in ("full", "lazy"):
            assert report.flips[f"{kind}/{mode}"] == regions.size(kind) * 8


@pytest.mark.slow
def test_ten_thousand_random_flips_of_a_large_artifact():
    """4 MiB in ~32 blobs; half the flips checked with "full", half with "lazy" (the full
    run, `make fuzz`, checks 10,000 per mode on 64 MiB)."""
    data = flips.large_artifact(4)
    bits = flips.random_bits(data, 10_000, seed=1)
    report = flips.flip_bits(data, bits[::2], modes=("full",))
    report_lazy = flips.flip_bits(data, bits[1::2], modes=("lazy",))
    assert report.wrong == [] and report_lazy.wrong == []
    assert sum(report.flips.values()) + sum(report_lazy.flips.values()) == 10_000
    assert len(flips.Regions(data).spans) > 40  # blobs and the padding between them


def test_a_padding_flip_is_harmless_and_a_blob_flip_is_not():
    regions = flips.Regions(SMALL)
    (start, _, _), = [s for s in regions.spans if s[2] == flips.PADDING][1:2]
    (blob, _, _), = [s for s in regions.spans if s[2] == flips.BLOB][:1]
    report = flips.flip_bits(SMALL, [8 * start + 3, 8 * blob + 3])
    assert report.wrong == [] and report.flips == {
        "padding/full": 1, "padding/lazy": 1, "blob/full": 1, "blob/lazy": 1}


def test_the_rules_are_not_vacuous():
    """A check that accepted everything would pass the tests above: it does not."""
    regions = flips.Regions(SMALL)
    buffer = bytearray(SMALL)
    blob = next(s for s, _, k in regions.spans if k == flips.BLOB)
    expected = flips._run(flips.parse_rlx(SMALL, verify="full"))
    assert flips.check_flip(buffer, 8 * blob, "full", flips.PADDING, expected) is not None
    assert np.array_equal(buffer, bytearray(SMALL))  # flipped back
