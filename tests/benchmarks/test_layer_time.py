"""layer_time's kinds follow the executed graph's layer type, kernel and shapes, and its
table puts each kind's time of every runner on one row."""

from __future__ import annotations

import pytest

from benchmarks.layer_time import layer_kind, table


@pytest.mark.parametrize("layer, kernel, ins, outs, kind", [
    ("Convolution", "brgconv_avx512_f32", [1, 3, 224, 224], [1, 16, 112, 112], "image conv"),
    ("Convolution", "brgconv_avx512_dw_bf16", [1, 256, 14, 14], [1, 256, 14, 14],
     "depthwise conv"),
    ("Convolution", "brgconv_avx512_1x1_I8", [1, 256, 14, 14], [1, 256, 14, 14],
     "pointwise conv"),
    ("Convolution", "brgconv_avx512_1x1_f32", [1, 16, 112, 112], [1, 32, 112, 112],
     "pointwise conv < 64 ch"),
    ("Convolution", "brgconv_avx512_1x1_f32", [1, 256, 1, 1], [1, 64, 1, 1],
     "conv on a 1x1 map"),
    ("Convolution", "brgconv_avx512_f32", [1, 64, 28, 28], [1, 64, 28, 28], "other conv"),
    ("FullyConnected", "brgemm_avx512_I8", [1, 1280], [1, 4], "FullyConnected"),
    ("Reorder", "reorder_brgemm_f32", [1, 3, 224, 224], [1, 3, 224, 224], "Reorder"),
    ("Subgraph", "jit_avx512_f32", [1, 16, 112, 112], [1, 16, 112, 112], "Subgraph"),
])
def test_each_node_gets_its_kind(layer, kernel, ins, outs, kind):
    assert layer_kind(layer, kernel, ins, outs) == kind


def test_a_row_sums_a_kind_over_precisions_and_shares_are_of_the_node_sum():
    results = {"ov-f32": {"p50_ms": 4.0, "ms": {"pointwise conv [f32]": 3.0,
                                               "depthwise conv [f32]": 1.0}},
               "rlx": {"p50_ms": 2.0, "ms": {"pointwise conv [i8]": 0.5,
                                            "pointwise conv [f32]": 0.5,
                                            "depthwise conv [f32]": 1.0}}}
    rows = {r.split(" | ")[0].strip("| "): r for r in table("m", 2, results).splitlines()}
    assert rows["pointwise conv"].endswith(
        "| 3.000 | 75.0% | f32 | 1.000 | 50.0% | f32+i8 |")
    assert rows["depthwise conv"].endswith("| 1.000 | 25.0% | f32 | 1.000 | 50.0% | f32 |")
