"""Decoded sequence agreement of CTC-like outputs, for `rlx-bake verify`.

A recogniser's per-step class scores (`rlx.onnx.step_scores`) are read by greedy CTC
decoding: the best class per step, repeats collapsed, the blank dropped. Two runs whose
scores differ by rounding read the same text when their decodings agree, so verify reports
the share of samples decoded identically beside the elementwise measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlx.cli.ui import CliError
from rlx.onnx.step_scores import StepScores

__all__ = ["decoded_agreement", "greedy_decode"]


def greedy_decode(scores: np.ndarray, blank: int) -> list[np.ndarray]:
    """Each sample's label sequence from scores laid out [N, T, C]: the argmax per step,
    a step equal to the one before dropped (repeats collapse), blanks dropped."""
    best = np.argmax(scores, axis=-1)
    new = np.ones(best.shape, dtype=bool)
    new[:, 1:] = best[:, 1:] != best[:, :-1]
    keep = new & (best != blank)
    return [path[kept] for path, kept in zip(best, keep)]


def decoded_agreement(name: str, ours: np.ndarray, ref: np.ndarray, scores: StepScores,
                      feeds: Mapping[str, np.ndarray], blank: int) -> dict[str, Any] | None:
    """The share of samples whose greedy decodings agree, the layout read ("T,N,C"), what
    told the time axis apart, and the blank used; None for an output that is not float
    scores of that shape (the ONNX rule saw the graph, not the run)."""
    if ref.ndim != 3 or ours.shape != ref.shape or ref.dtype.kind != "f":
        return None
    classes = ref.shape[scores.class_axis]
    if not 0 <= blank < classes:
        raise CliError(f"--ctc-blank {blank} is not a class of output '{name}' "
                       f"({classes} classes, 0..{classes - 1})")
    time, told = _time_axis(ref.shape, scores, feeds)
    batch = 3 - time - scores.class_axis
    order = (batch, time, scores.class_axis)
    decoded = [greedy_decode(np.transpose(x, order), blank) for x in (ours, ref)]
    same = sum(np.array_equal(a, b) for a, b in zip(*decoded))
    samples = ref.shape[batch]
    letters = {batch: "N", time: "T", scores.class_axis: "C"}
    return {"layout": ",".join(letters[i] for i in range(3)), "time_axis_from": told,
            "blank": blank, "samples": samples, "identical": int(same),
            "agree": same / samples if samples else None}


def _time_axis(shape: tuple[int, ...], scores: StepScores,
               feeds: Mapping[str, np.ndarray]) -> tuple[int, str]:
    """The time axis and what told it: the declared dims, else the run's sizes (the one
    axis whose size is not the inputs' leading size), else the assumption of batch first."""
    if scores.time_axis is not None:
        return scores.time_axis, "declared dims"
    a, b = (i for i in range(3) if i != scores.class_axis)
    leading = {f.shape[0] for f in feeds.values() if np.ndim(f)}
    batch_sized = [i for i in (a, b) if shape[i] in leading]
    if len(batch_sized) == 1:
        return (b if batch_sized == [a] else a), "input batch size"
    return b, "assumed batch first"
