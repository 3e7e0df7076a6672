"""TfIdfVectorizer: n-gram counts of integer token rows, as comparisons with the pool.

For each gram length n and skip distance d, the windows x[i], x[i + d], ..., x[i + (n-1)d]
of a row are compared with every pool n-gram at once and the hits counted; a matrix maps
pool grams to output columns (`ngram_indexes`), and the weighting mode is applied last.
Unigrams are counted once, whatever the skip distance (ONNX's rule).
"""

from __future__ import annotations

import numpy as np

from rlx.ir import CompareOp, Concat, DType, ReduceOp
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter

__all__ = ["tf_idf_vectorizer"]


@converter("TfIdfVectorizer")
def tf_idf_vectorizer(n: NodeContext) -> int:
    s = n.s
    x = n.input(0)
    if n.attr("pool_strings"):
        raise n.fail("string pools are not supported (rlx has no string dtype)")
    shape = s.shape(x)
    width = shape.dims[-1] if shape.rank else 1
    if shape.rank > 2 or not isinstance(width, int):
        raise n.fail(f"needs [C] or [B, C] rows of static length, got {shape}")
    rows = s.reshape(x, (-1, width))
    pool = np.asarray(n.attr("pool_int64s"), np.int64)
    starts = list(n.attr("ngram_counts"))
    lo, hi = n.attr("min_gram_length"), n.attr("max_gram_length")
    skips = n.attr("max_skip_count", 0)
    counts = []  # one [B, grams of length k] per gram length k, in pool order

    def zeros(count: int) -> int:  # a gram length that is not counted
        size = s.emit(Concat(0), s.shape_of(rows, 0, 1), s.const(np.array([count], np.int64)))
        return s.fill(size, 0.0, DType.F32)

    for k, start in enumerate(starts, start=1):
        end = starts[k] if k < len(starts) else len(pool)
        grams = pool[start:end].reshape(-1, k)
        if not lo <= k <= hi or not len(grams):
            counts.append(zeros(len(grams)))
            continue
        hits = []
        for distance in range(1, (1 if k == 1 else skips + 1) + 1):
            span = (k - 1) * distance
            if span >= width:
                break
            windows = [s.slice(rows, (t * distance,), (width - span + t * distance,), (1,))
                       for t in range(k)]
            stacked = s.concat([s.unsqueeze(w, (-1, -2)) for w in windows], -1)  # [B,W,1,k]
            same = s.compare(CompareOp.EQ, stacked, s.cast(s.const(grams), shape.dtype))
            hit = s.reduce(ReduceOp.MIN, same, (-1,), keepdims=False)  # all k tokens match
            hits.append(s.reduce(ReduceOp.SUM, s.cast(hit, DType.F32), (1,), keepdims=False))
        total = hits[0] if hits else zeros(len(grams))
        for h in hits[1:]:
            total = s.add(total, h)
        counts.append(total)
    indexes = list(n.attr("ngram_indexes"))
    route = np.zeros((len(indexes), max(indexes) + 1), np.float32)
    route[np.arange(len(indexes)), indexes] = 1
    frequencies = s.matmul(s.concat(counts, -1) if len(counts) > 1 else counts[0],
                           s.const(route))
    out = _weighted(n, frequencies)
    return s.reshape(out, (-1,)) if shape.rank < 2 else out


def _weighted(n: NodeContext, frequencies: int) -> int:
    s = n.s
    mode = n.attr("mode", "TF")
    weights = n.attr("weights")
    w = None if not weights else s.const(np.asarray(weights, np.float32))
    if mode == "TF":
        return frequencies
    if mode == "IDF":
        present = s.cast(s.compare(CompareOp.GT, frequencies, s.like(0, frequencies)),
                         DType.F32)
        return present if w is None else s.mul(present, w)
    if mode == "TFIDF":
        return frequencies if w is None else s.mul(frequencies, w)
    raise n.fail(f"unknown mode {mode!r}")
