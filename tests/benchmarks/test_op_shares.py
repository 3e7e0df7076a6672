"""The op-share table charges a fused rlx op against the ONNX ops it replaces."""

from __future__ import annotations

from benchmarks.op_shares import table


def test_a_fused_op_shares_a_row_with_the_ops_it_replaces():
    rlx = {"Conv": 6.0, "Silu": 3.0, "Mul": 1.0}
    ort = {"Conv": 5.0, "Sigmoid": 2.0, "Mul": 2.0, "Resize": 1.0}
    text, flagged = table("m", rlx, ort)
    row = next(line for line in text.splitlines() if line.startswith("| Silu + Mul + Sigmoid |"))
    # rlx: 4 of 10 s (40%); onnxruntime: 4 of 10 s (40%)
    assert row.endswith("| 4000.000 | 40.0% | 4000.000 | 40.0% | 1.00 |")
    assert flagged == []


def test_an_op_far_above_its_share_is_flagged():
    text, flagged = table("m", {"Conv": 6.0, "Resize": 4.0}, {"Conv": 9.0, "Resize": 1.0})
    assert flagged == ["Resize"]
    assert "| Resize | Resize | 4000.000 | 40.0% |" in text
