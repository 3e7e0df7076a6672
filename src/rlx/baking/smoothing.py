"""Smoothing an int8 MatMul's activation: its outlier channels moved into the weight.

A transformer's hidden states carry a few channels far larger than the rest (on a 3-layer
BERT encoder, the FFN input's largest channel peak is 42x the median one); one u8 scale for
the whole tensor leaves the ordinary channels a handful of levels. For any positive factor
s_k per input channel, x @ W = (x / s) @ (s W): dividing channel k by
s_k = peak_x(k)^MIGRATION / peak_W(k)^(1 - MIGRATION) (SmoothQuant's rule; peak_W(k) the
largest |w| of weight row k) evens the activation's channels, and the weight, quantised per
output channel, takes the difference. The division is one Mul before the activation's
QuantizeLinear (`rlx.baking.int8.Int8Emitter`), the weight is stored scaled, and the numpy
runtime computes the same numerics as the reference.

An activation is smoothed when its int8 readers are all MatMuls over its last axis, each
with a weight no other candidate reads (one factor per activation, from the peaks of all
its readers' weights: a weight shared by many activations, an unrolled RNN's, would need a
scaled copy per activation), when no other reader takes its quantised value (it is no int8
node's quantised output and no int8 chain node reads it, `rlx.baking.int8_chain`: those
would read the divided tensor), and when its channels are uneven: the largest channel peak
at least `UNEVEN` times the median one.

A channel is never divided by less than the median channel's peak gives: calibration sees
a few inputs, and a channel quiet on all of them (peak near 0, a factor near 0) is
multiplied far past the range on an input where it speaks, and clipped. On a 3-layer BERT
encoder's fast plan (every product int8, calibrated on 4 feeds), the calibration feeds'
1 - cosine was 4.3-4.8e-4 and 32 held-out inputs' 3.9-11.9e-4 (worst cosine 0.99881,
under 0.999: the guard's `HELD_OUT_MARGIN`, 0.8 of the allowance, cannot cover an error
only held-out inputs have); with the floor, 3.8-5.0e-4 and 3.3-6.9e-4 (0.99931), the same
plan. Judged on each calibration feed with the ranges and factors of the other three
(leave-one-out), a CRNN's LSTM input product alone erred 8.5e-4 without the floor, 4e-5
with it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

import numpy as np

from rlx.baking.int8 import ActivationRange, Candidate, plan_int8
from rlx.ir.graph import Graph
from rlx.ir.ops.linalg import MatMul
from rlx.ir.rewrite import constant_value

__all__ = ["MIGRATION", "UNEVEN", "smooth_ranges"]

MIGRATION = 0.75
"""How much of the activation's channel spread moves into the weight (0: none, 1: all).
Measured on a 3-layer BERT's six projections per layer, as the relative error of x @ W with
both sides int8: 0.75 cut the FFN's (outlier channels) from 0.026-0.034 to 0.009-0.012 and
left the others as they were or better, where 0.5 left the worst at 0.031."""

UNEVEN = 4.0
"""The largest channel peak over the median one from which an activation is smoothed."""


def smooth_ranges(graph: Graph, found: list[Candidate], ranges: dict[int, ActivationRange]
                  ) -> dict[int, ActivationRange]:
    """`ranges` with each activation that is smoothed (module doc) holding its factors and
    the range of the divided tensor."""
    readers: dict[int, list[Candidate]] = defaultdict(list)
    for c in found:
        readers[c.activation].append(c)
    shared = Counter(c.weight for c in found)
    _, links = plan_int8(graph, found)
    users = graph.users()
    elsewhere = {c.output for c in found} | links.requantised | set(links.shared)
    smoothed = dict(ranges)
    for source, group in readers.items():
        found_range = ranges[source]
        if source in elsewhere or any(u in links.nodes for u in users[source]):
            continue
        if found_range.channels is None or any(
                not isinstance(graph.node(c.node).op, MatMul) or shared[c.weight] > 1
                for c in group):
            continue
        low, high = found_range.channels
        peak = np.maximum(np.abs(low), np.abs(high))
        if peak.max() < UNEVEN * max(float(np.median(peak)), 1e-30):
            continue
        rows = np.max([_row_peaks(graph, c) for c in group], axis=0)
        floor = float(np.median(peak)) or float(peak.max())  # quiet channels: module doc
        factors = (np.maximum(peak, floor) ** MIGRATION
                   / np.maximum(rows, 1e-12) ** (1 - MIGRATION)).astype(np.float32)
        smoothed[source] = dataclasses.replace(
            found_range, low=float((low / factors).min()), high=float((high / factors).max()),
            smooth=factors)
    return smoothed


def _row_peaks(graph: Graph, c: Candidate) -> np.ndarray:
    weight = constant_value(graph.node(c.weight))
    assert weight is not None  # candidates have constant weights
    return np.abs(np.asarray(weight, np.float64)).max(axis=1)
